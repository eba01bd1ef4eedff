"""JSON report: the whole diagnosis, one object."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis

JSON_FORMAT = "hlo-doctor.diagnosis/1"


def _plain(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def render_json(diagnosis: Diagnosis) -> str:
    """``{"format", "step_time_us", "recoverable_us", "summary", "findings": [{code, name, module, op,
    shape, time_per_step_us, pct_of_step, recoverable_us, source, fix, evidence, ...}], ...}``."""
    doc = {"format": JSON_FORMAT, **diagnosis.to_dict()}
    return json.dumps(_plain(doc), indent=1) + "\n"
