"""JSON report: the whole diagnosis, one object."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hlo_doctor.core.format import json_safe

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis

JSON_SCHEMA = "hlo-doctor.diagnosis/1"


def to_json(diagnosis: Diagnosis) -> str:
    """``{"schema", "step_time_us", "recoverable_us", "summary", "findings": [{code, name, module, op,
    shape, time_per_step_us, pct_of_step, recoverable_us, source, fix, evidence, ...}], ...}``."""
    doc = {"schema": JSON_SCHEMA, **diagnosis.to_dict()}
    return json.dumps(json_safe(doc), indent=1) + "\n"
