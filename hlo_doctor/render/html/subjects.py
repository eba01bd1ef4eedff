"""Pages of the results commands hold in memory, for the renderer registry and the ``--out`` folders:
each result goes through its own JSON renderer first, so a page says what the JSON beside it says.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.errors import NotAvailableError
from hlo_doctor.render.html import vega
from hlo_doctor.render.html.document import to_html
from hlo_doctor.render.html.pages import capture_page, doctor_page, gate_page, verify_page

if TYPE_CHECKING:
    from hlo_doctor.gate.result import GateResult

__all__ = ["capture_html", "doctor_html", "gate_to_html", "require_charts", "verify_html"]


def require_charts(what: str) -> None:
    """:class:`NotAvailableError` (exit 2, one line naming the extra) when vl-convert is missing."""
    if not vega.available():
        raise NotAvailableError(f"{what} draws charts with vl-convert-python, which is not installed",
                                vega.INSTALL_HINT)


def gate_to_html(result: GateResult) -> str:
    """``gate --format html``: the gate's page, built from its JSON verdict."""
    from hlo_doctor.render.gate import to_json

    require_charts("gate --format html")
    return to_html(gate_page(json.loads(to_json(result))), charts=True)


def _doc(text: str | None) -> dict[str, Any] | None:
    return json.loads(text) if text else None


def verify_html(verify_json: str) -> str:
    """``report.html`` of a ``verify --out`` folder, from its ``verify.json`` text (engine A/B or
    ``--target``); tables only, each chart's place naming the extra, when vl-convert is missing."""
    return to_html(verify_page(json.loads(verify_json)))


def capture_html(stats_json: str, diagnosis_json: str | None = None) -> str:
    """``report.html`` of a run directory: its op stats (and diagnosis) as JSON texts."""
    doc = json.loads(stats_json)
    return to_html(capture_page(doc, _doc(diagnosis_json)))


def doctor_html(doctor_json: str, diagnosis_json: str | None, stats_json: str | None,
                verify_json: str | None) -> str:
    """``report.html`` of a ``doctor --out`` folder, from the JSON texts written beside it."""
    missing = () if stats_json else ("the step and the op charts: the folder has no profile/opstats.json",)
    return to_html(doctor_page(json.loads(doctor_json), _doc(diagnosis_json), _doc(stats_json), _doc(verify_json),
                               missing))
