"""The gate's sections: per-op change against the policy's limit and the capture noise (the threshold
bands), the new and gone ops, the step line, the violations and the judged ops as a table.

Read from the gate's JSON verdict (``hlo-doctor.gate/1``): ``gate --format html`` renders its own
result through the same document.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hlo_doctor.hlo.shape import fmt_shape
from hlo_doctor.render.html import charts
from hlo_doctor.render.html.model import Chart, Column, Note, Section, Table, num_cell, table, text_cell

__all__ = ["GATE_OPS", "gate_sections", "op_name", "regression_limits"]

GATE_OPS = 20
"""Matched ops drawn in the change chart (the most time first)."""

_ZONES = ("allowed", "within noise", "regression")
_ZONE_COLORS = ("#54a24b", "#eeca3b", "#e45756")
_MARKS = ("improved", "no change", "within noise", "regressed")


def op_name(op: Mapping[str, Any]) -> str:
    """``jit_sample/copy f32[64,256000]``: module, op names and short shape of one gate row."""
    return f"{op.get('module')}/{op.get('ops')} {fmt_shape(str(op.get('shape') or ''))}"


def regression_limits(doc: Mapping[str, Any]) -> tuple[float, float]:
    """(policy limit, noise limit) as ratios: an op is a regression only above both."""
    policy = doc.get("policy") or {}
    limit = 1.0 + float(policy.get("max_op_regression_pct") or 0.0) / 100.0
    noise = float(doc.get("capture_noise") or 0.0) * float(policy.get("noise_z") or 0.0)
    return limit, math.exp(noise) if noise > 0 else limit


def _judgement(o: Mapping[str, Any]) -> str:
    """The judgement with why it is undecided (``within noise (medians +128.4%; too few samples ...)``)."""
    why = o.get("why")
    return f"{o.get('judgement', '')} ({why})" if why else str(o.get("judgement", ""))


def _mark(judgement: str) -> str:
    if "fails" in judgement or judgement == "regressed":
        return "regressed"
    if judgement in ("improved", "no change"):
        return judgement
    return "within noise"


def _change_chart(doc: Mapping[str, Any], judged: Sequence[Mapping[str, Any]]) -> Chart | None:
    shown = [o for o in judged if (o.get("comparison") or {}).get("ratio")][:GATE_OPS]
    if not shown:
        return None
    limit, noise = regression_limits(doc)
    rows = []
    for o in shown:
        c = o["comparison"]
        rows.append({"op": op_name(o), "ratio": float(c["ratio"]), "low": c.get("ci_low"), "high": c.get("ci_high"),
                     "mark": _mark(str(o.get("judgement", "")))})
    bands: list[dict[str, Any]] = [{"from": None, "to": limit, "zone": _ZONES[0]}]
    if noise > limit:
        bands.append({"from": limit, "to": noise, "zone": _ZONES[1]})
    bands.append({"from": max(limit, noise), "to": None, "zone": _ZONES[2]})
    speed = (doc.get("speed") or {}).get("factor")
    alt = (f"Per-op change of the {len(rows)} matched ops with the most time: a diamond at the candidate's "
           "median over the baseline's" + (f" (the baseline scaled by the machine speed x{speed:.3f})" if speed else "")
           + ", its bootstrap CI as a line where the samples allow one, on a log axis. Green: within the policy's "
           f"limit (x{limit:.2f}); " + (f"amber: within the noise between the captures (up to x{noise:.2f}); "
                                       if noise > limit else "") + "red: a regression once significant. "
           + ", ".join(f"{r['op']} x{r['ratio']:.2f}" for r in rows[:5]) + (" ..." if len(rows) > 5 else "."))
    spec = charts.ratio_intervals(rows, bands, label="op", value_title="candidate / baseline (log scale)",
                                  color_field="mark", color_names=_MARKS, description=alt,
                                  band_names=_ZONES, band_colors=_ZONE_COLORS)
    # The times are means per step; the ratio and change are the judgement's (per-step medians, or the
    # means without samples): each column says which.
    columns = (Column("op"), Column("baseline mean (us/step)", True, "baseline_us"),
               Column("candidate mean (us/step)", True, "candidate_us"),
               Column("judged ratio", True, "comparison.ratio"),
               Column("judged change %", True, "comparison.change_pct"), Column("CI low", True, "comparison.ci_low"),
               Column("CI high", True, "comparison.ci_high"), Column("judgement"))
    body = [[text_cell(op_name(o)), num_cell(o.get("baseline_us"), ",.1f"), num_cell(o.get("candidate_us"), ",.1f"),
             num_cell(o["comparison"].get("ratio"), ".4f"), num_cell(o["comparison"].get("change_pct"), "+.1f"),
             num_cell(o["comparison"].get("ci_low"), ".4f"), num_cell(o["comparison"].get("ci_high"), ".4f"),
             text_cell(_judgement(o))] for o in shown]
    note = f"regression limits: policy x{limit:.3f}" + (f", capture noise x{noise:.3f}" if noise > limit else "")
    return Chart("gate-change", "Per-op change against its threshold band", alt, spec,
                 table("table-gate-change", "Per-op change", columns, body, note))


def _new_gone_chart(ops: Sequence[Mapping[str, Any]]) -> Chart | None:
    moved = [o for o in ops if o.get("status") in ("new", "vanished")]
    if not moved:
        return None
    moved.sort(key=lambda o: -float(o.get("candidate_us") or o.get("baseline_us") or 0.0))
    unit, div = charts.unit_of([float(o.get("candidate_us") or o.get("baseline_us") or 0.0) for o in moved])
    values = []
    for o in moved:
        new = o.get("status") == "new"
        us = float((o.get("candidate_us") if new else o.get("baseline_us")) or 0.0)
        values.append({"op": op_name(o), "time": (us if new else -us) / div, "status": "new" if new else "gone",
                       "fails": "fails" in str(o.get("judgement", "")), "judgement": str(o.get("judgement", ""))})
    failing = sum(1 for v in values if v["fails"])
    alt = (f"Bars of the ops only one capture has: {sum(1 for v in values if v['status'] == 'new')} new in the "
           f"candidate (right, its time per step) and {sum(1 for v in values if v['status'] == 'gone')} gone "
           f"(left, the baseline's time per step); {failing} fail the gate (outlined).")
    spec = charts.diverging_bars(values, label="op", value="time", value_title=f"time per step ({unit}); "
                                 "new right, gone left", color="status", names=("new", "gone"), description=alt)
    columns = (Column("op"), Column("status"), Column("baseline (us/step)", True, "baseline_us"),
               Column("candidate (us/step)", True, "candidate_us"), Column("bytes written", True, "bytes_written"),
               Column("judgement"))
    body = [[text_cell(op_name(o)), text_cell(o.get("status")), num_cell(o.get("baseline_us"), ",.1f"),
             num_cell(o.get("candidate_us"), ",.1f"), num_cell(o.get("bytes_written"), ",d"),
             text_cell(_judgement(o))] for o in moved]
    return Chart("gate-new-gone", "New and gone ops", alt, spec,
                 table("table-gate-new-gone", "New and gone ops", columns, body))


def _step_table(doc: Mapping[str, Any]) -> Table:
    base, cand = doc.get("baseline") or {}, doc.get("candidate") or {}
    step = doc.get("step") or {}
    c = step.get("comparison") or {}
    columns = (Column("capture"), Column("label"), Column("steps", True, "num_steps"),
               Column("step time (us)", True, "step_time_us"), Column("op time (us)", True, "op_time_us"))
    body = [[text_cell(side), text_cell(d.get("label")), num_cell(d.get("num_steps"), "d"),
             num_cell(d.get("step_time_us"), ",.1f"), num_cell(d.get("op_time_us"), ",.1f")]
            for side, d in (("baseline", base), ("candidate", cand))]
    note = (f"step (median): change {c['change_pct']:+.1f}%, {_judgement(step)}"
            if c.get("change_pct") is not None else f"step: {step.get('judgement', 'not judged')}")
    return table("table-gate-step", "The two captures", columns, body, note)


def gate_sections(doc: Mapping[str, Any]) -> tuple[Section, ...]:
    """The gate part of a page."""
    ops = [o for o in doc.get("ops") or [] if isinstance(o, Mapping)]
    judged = [o for o in ops if o.get("status") == "matched" and o.get("judgement") not in ("below floor", "ignored")]
    judged.sort(key=lambda o: -max(float(o.get("baseline_us") or 0.0), float(o.get("candidate_us") or 0.0)))
    items: list[Any] = [_step_table(doc)]
    items.extend(Note(str(v.get("message", "")), "fail") for v in doc.get("violations") or [])
    missing: list[str] = []
    for chart, why in ((_change_chart(doc, judged), "per-op change: no matched op above the floor has a ratio"),
                       (_new_gone_chart(ops), "new and gone ops: none; both captures ran the same ops")):
        if chart is not None:
            items.append(chart)
        else:
            missing.append(why)
    items.extend(Note(str(n)) for n in doc.get("notes") or [])
    return (Section("gate", "The gate", tuple(items), tuple(missing)),)
