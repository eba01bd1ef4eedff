"""Pages of the results commands hold in memory, for the renderer registry and the ``--out`` folders:
each result goes through its own JSON renderer first, so a page says what the JSON beside it says.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from hlo_doctor.render.html.document import to_html
from hlo_doctor.render.html.pages import capture_page, doctor_page, gate_page, verify_page

if TYPE_CHECKING:
    from hlo_doctor.gate.result import GateResult
    from hlo_doctor.opstats.breakdown import StepBreakdown
    from hlo_doctor.opstats.schema import OpStats

__all__ = ["COMPACT_FROM", "capture_doc", "capture_html", "doctor_html", "gate_to_html", "verify_html"]

COMPACT_FROM = 50_000
"""Per-step samples from which :func:`capture_doc` sums them before writing the page's document."""


def gate_to_html(result: GateResult) -> str:
    """``gate --format html``: the gate's page, built from its JSON verdict (tables only, each chart's
    place naming the extra, when vl-convert is missing)."""
    from hlo_doctor.render.gate import to_json

    return to_html(gate_page(json.loads(to_json(result))))


def _doc(text: str | None) -> dict[str, Any] | None:
    return json.loads(text) if text else None


def verify_html(verify_json: str) -> str:
    """``report.html`` of a ``verify --out`` folder, from its ``verify.json`` text (engine A/B or
    ``--target``); tables only, each chart's place naming the extra, when vl-convert is missing."""
    return to_html(verify_page(json.loads(verify_json)))


def capture_html(stats: dict[str, Any], diagnosis_json: str | None = None, memory_json: str | None = None) -> str:
    """``report.html`` of a run directory: its op-stats document (:func:`capture_doc`), diagnosis and
    memory (``memory --format json``, when the capture holds buffer assignments)."""
    return to_html(capture_page(stats, _doc(diagnosis_json), _doc(memory_json)))


def doctor_html(doctor_json: str, diagnosis_json: str | None, stats_json: str | None,
                verify_json: str | None) -> str:
    """``report.html`` of a ``doctor --out`` folder, from the JSON texts written beside it."""
    missing = () if stats_json else ("the step and the op charts: the folder has no profile/opstats.json",)
    return to_html(doctor_page(json.loads(doctor_json), _doc(diagnosis_json), _doc(stats_json), _doc(verify_json),
                               missing))


def _compact_per_step(stats: OpStats) -> OpStats:
    """The same op stats with the per-step samples summed per (step, program, category): the step
    charts' sums are unchanged, and a 5,000-step capture's 700,000 samples become a few thousand.

    Each (module, program id, category) keeps the name of its first op, so the table still joins
    every summed sample to its category and program. Columns of ``per_step``: as before.
    """
    from dataclasses import replace

    from hlo_doctor.opstats.schema import PER_STEP_COLUMNS

    keys = ["module", "program_id", "op"]
    samples = stats.per_step.merge(stats.table[[*keys, "category"]], on=keys, how="left")
    samples["category"] = samples["category"].fillna("other")
    samples["op"] = samples.groupby(["module", "program_id", "category"], dropna=False, sort=False)["op"].transform(
        "first")
    summed = samples.groupby(["step", *keys], dropna=False, sort=False, as_index=False)["time_us"].sum()
    summed["canonical_key"] = ""
    return replace(stats, per_step_data=summed[list(PER_STEP_COLUMNS)])


def _mean_steps(bd: StepBreakdown) -> tuple[StepBreakdown, dict[str, int]]:
    """The breakdown with one slice per device, its mean step; and the steps each mean is over (by
    ``host device``). The summary's idle share is the caller's to keep exact."""
    from dataclasses import replace

    from hlo_doctor.opstats.breakdown import StepSlice

    per: dict[tuple[str, str], list[StepSlice]] = {}
    for st in bd.steps:
        per.setdefault((st.host, st.device), []).append(st)
    means = []
    for (host, device), slices in per.items():
        n = len(slices)
        kinds = {k for st in slices for k in st.idle_by_kind} | {k for st in slices for k in st.host_us}

        def mean(name: str, sl: list[StepSlice] = slices, n: int = n) -> float:
            return sum(getattr(st, name) for st in sl) / n

        means.append(StepSlice(host, device, 0, mean("start_us"), mean("wall_us"), mean("busy_us"), mean("op_us"),
                               {k: sum(st.host_us.get(k, 0.0) for st in slices) / n for k in kinds},
                               {k: sum(st.idle_by_kind.get(k, 0.0) for st in slices) / n for k in kinds}))
    return replace(bd, steps=tuple(means)), {f"{h} {d}".strip(): len(v) for (h, d), v in per.items()}


def capture_doc(stats: OpStats) -> dict[str, Any]:
    """The op-stats JSON a capture's page is built from (``stats --format json``), made small for the
    page where the capture is large: per-step samples summed per program and category beyond
    :data:`COMPACT_FROM` samples, and a breakdown of more steps than its chart draws reduced to each
    device's mean step (``breakdown.mean_of``: the steps each is over)."""
    from dataclasses import replace

    from hlo_doctor.opstats.io import to_json
    from hlo_doctor.render.html.step import MAX_BREAKDOWN_ROWS

    if len(stats.per_step) > COMPACT_FROM:
        stats = _compact_per_step(stats)
    full = stats.breakdown
    mean_of: dict[str, int] = {}
    if full is not None and len(full.steps) > MAX_BREAKDOWN_ROWS:
        means, mean_of = _mean_steps(full)
        stats = replace(stats, breakdown=means)
    doc = dict(json.loads(to_json(stats)))
    if mean_of and full is not None:
        doc["breakdown"]["mean_of"] = mean_of
        doc["breakdown"]["summary"]["idle_pct"] = full.idle_pct
    return doc
