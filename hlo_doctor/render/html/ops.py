"""The ops section of a capture's page: the top ops' time per step with each finding's recoverable part
over it, achieved memory bandwidth against the chip's peak (where the roofline has a peak), the op
table, and the findings.

Inputs are the JSON documents: op stats (``hlo-doctor.opstats/1``) and a diagnosis
(``hlo-doctor.diagnosis/1``); either may be missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hlo_doctor.core.format import fmt_source, round_parts
from hlo_doctor.core.model import PART_LABELS
from hlo_doctor.hlo.shape import fmt_shape
from hlo_doctor.render.html import charts
from hlo_doctor.render.html.model import Chart, Column, Note, Section, Table, num_cell, table, text_cell
from hlo_doctor.render.html.step import time_cell

__all__ = ["GIB_PER_GB", "TOP_OPS", "TABLE_OPS", "findings_table", "op_label", "ops_section", "recoverable_by_op"]

TOP_OPS = 20
"""Ops drawn in the charts."""
TABLE_OPS = 100
"""Ops listed in the op table."""
GIB_PER_GB = 1e9 / 2**30
"""A peak in GB/s (the device's unit) times this is GiB/s (the table's unit)."""


def op_label(row: Mapping[str, Any]) -> str:
    """``3. jit_sample/copy``: rank, module and op (unique per row of one table)."""
    return f"{row.get('rank')}. {row.get('module')}/{row.get('op')}"


def recoverable_by_op(findings: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[float, str]]:
    """(module, op) -> (the largest recoverable estimate of its findings in us, their codes)."""
    out: dict[tuple[str, str], tuple[float, str]] = {}
    for f in findings:
        key = (str(f.get("module", "")), str(f.get("op", "")))
        rec = float(f.get("recoverable_us") or 0.0)
        old_rec, old_codes = out.get(key, (0.0, ""))
        codes = ", ".join(c for c in (old_codes, str(f.get("code", ""))) if c)
        out[key] = (max(old_rec, rec), codes)
    return out


def _top_chart(rows: Sequence[Mapping[str, Any]], findings: Sequence[Mapping[str, Any]]) -> Chart:
    top = list(rows[:TOP_OPS])
    rec = recoverable_by_op(findings)
    unit, div = charts.unit_of([float(r.get("time_per_step_us") or 0.0) for r in top])
    parts = ("time per step", "recoverable (finding)")
    values = []
    for r in top:
        marked = rec.get((str(r.get("module")), str(r.get("op"))), (0.0, ""))[0]
        values.append({"op": op_label(r), parts[0]: float(r.get("time_per_step_us") or 0.0) / div,
                       parts[1]: marked / div})
    flagged = [r for r in top if (str(r.get("module")), str(r.get("op"))) in rec]
    beyond = [op_label(r) for r in flagged
              if rec[(str(r.get("module")), str(r.get("op")))][0] > float(r.get("time_per_step_us") or 0.0)]
    alt = (f"Horizontal bars of the {len(top)} ops with the most time per step, largest first"
           + (f"; {len(flagged)} of them carry a finding, whose recoverable estimate is drawn over the op's "
              "bar in red" if flagged else "; no finding falls on them")
           + (f" ({', '.join(beyond)}: the estimate passes the op's own time, as it counts the host time the "
              "finding removes too)" if beyond else "")
           + ". The table below holds the numbers.")
    spec = charts.overlaid_bars(values, label="op", parts=parts, value_title=f"time per step ({unit})",
                                description=alt)
    columns = (Column("#", True, "rank"), Column("module"), Column("op"), Column("category"), Column("shape"),
               Column(f"time/step ({unit})", True, "time_per_step_us"), Column("% of step", True, "pct_of_step"),
               Column(f"recoverable ({unit})", True, "recoverable_us"), Column("findings"))
    body = []
    for r in top:
        found = rec.get((str(r.get("module")), str(r.get("op"))))
        recoverable: float | None = found[0] if found is not None else None
        codes = found[1] if found is not None else ""
        body.append([num_cell(r.get("rank"), "d"), text_cell(r.get("module")), text_cell(r.get("op")),
                     text_cell(r.get("category")), text_cell(fmt_shape(str(r.get("shape") or ""))),
                     time_cell(r.get("time_per_step_us"), div), num_cell(r.get("pct_of_step"), ".2f"),
                     time_cell(recoverable, div), text_cell(codes)])
    return Chart("top-ops", f"Top {len(top)} ops: time per step, recoverable part marked", alt, spec,
                 table("table-top-ops", f"Top ops ({unit} per step)", columns, body))


def _bandwidth_chart(rows: Sequence[Mapping[str, Any]], peaks: Mapping[str, Any]) -> Chart | None:
    peak_gbps = float(peaks.get("hbm_gbps") or 0.0)
    measured = [r for r in rows[:TOP_OPS] if r.get("memory_bw_gibps") is not None]
    if not peak_gbps or not measured:
        return None
    peak = peak_gbps * GIB_PER_GB
    values = [{"op": op_label(r), "GiB/s": float(r["memory_bw_gibps"]), "bound": str(r.get("bound_by") or "")}
              for r in measured]
    best = max(measured, key=lambda r: float(r["memory_bw_gibps"]))
    alt = (f"Horizontal bars of the achieved memory bandwidth of {len(measured)} of the top ops, with a dashed "
           f"line at the device's peak ({peak:,.0f} GiB/s = {peak_gbps:,.0f} GB/s); the closest to it is "
           f"{op_label(best)} at {float(best.get('pct_of_peak_bw') or 0):.0f}% of peak.")
    spec = charts.reference_bars(values, label="op", value="GiB/s", value_title="achieved bandwidth (GiB/s)",
                                 color="bound", reference=peak, reference_label=f"peak {peak:,.0f} GiB/s",
                                 description=alt)
    columns = (Column("#", True, "rank"), Column("module"), Column("op"),
               Column("GiB/s", True, "memory_bw_gibps"), Column("% of peak BW", True, "pct_of_peak_bw"),
               Column("GFLOP/s", True, "flop_rate_gflops"), Column("% of peak FLOP/s", True, "pct_of_peak_flops"),
               Column("FLOP/byte", True, "intensity_flop_per_byte"), Column("bound by", False, "bound_by"))
    body = [[num_cell(r.get("rank"), "d"), text_cell(r.get("module")), text_cell(r.get("op")),
             num_cell(r.get("memory_bw_gibps"), ",.1f"), num_cell(r.get("pct_of_peak_bw"), ".1f"),
             num_cell(r.get("flop_rate_gflops"), ",.1f"), num_cell(r.get("pct_of_peak_flops"), ".1f"),
             num_cell(r.get("intensity_flop_per_byte"), ",.2f"), text_cell(r.get("bound_by"))] for r in measured]
    note = (f"peak: {peak_gbps:,.1f} GB/s HBM, {float(peaks.get('tflops') or 0):,.1f} TFLOP/s "
            f"({peaks.get('source', '')})")
    return Chart("bandwidth", "Achieved memory bandwidth against the chip's peak", alt, spec,
                 table("table-bandwidth", "Roofline of the top ops", columns, body, note))


def op_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """The op table's first :data:`TABLE_OPS` rows with their roofline and source columns."""
    columns = (Column("#", True, "rank"), Column("module"), Column("program", True, "program_id"), Column("op"),
               Column("category"), Column("shape"), Column("time/step (us)", True, "time_per_step_us"),
               Column("% of step", True, "pct_of_step"), Column("runs/step", True, "runs_per_step"),
               Column("bytes", True, "bytes_accessed"), Column("GiB/s", True, "memory_bw_gibps"),
               Column("% of peak BW", True, "pct_of_peak_bw"), Column("source", False, "source"))
    body = [[num_cell(r.get("rank"), "d"), text_cell(r.get("module")), num_cell(r.get("program_id"), "d"),
             text_cell(r.get("op")), text_cell(r.get("category")), text_cell(fmt_shape(str(r.get("shape") or ""))),
             num_cell(r.get("time_per_step_us"), ",.1f"), num_cell(r.get("pct_of_step"), ".2f"),
             num_cell(r.get("runs_per_step"), ",.2f"), num_cell(r.get("bytes_accessed"), ",d"),
             num_cell(r.get("memory_bw_gibps"), ",.1f"), num_cell(r.get("pct_of_peak_bw"), ".1f"),
             text_cell(fmt_source(str(r.get("source") or "")))] for r in rows[:TABLE_OPS]]
    left = len(rows) - len(body)
    return table("table-ops", "Op table", columns, body,
                 f"{left} more ops: 'hlo-doctor stats RUN --format csv' has every row" if left > 0 else "")


def findings_table(findings: Sequence[Mapping[str, Any]]) -> Table:
    """One row per finding: rule, severity, op, time and recoverable per step, source, fix, and the
    model library's own remedy where the line is inside one."""
    columns = (Column("rule", False, "code"), Column("severity"), Column("module"), Column("op"), Column("shape"),
               Column("time/step (us)", True, "time_per_step_us"), Column("% of step", True, "pct_of_step"),
               Column("recoverable (us)", True, "recoverable_us"), Column("made of (us)"), Column("source"),
               Column("fix"), Column("remedy"))
    body = [[text_cell(f.get("code")), text_cell(f.get("severity")), text_cell(f.get("module")),
             text_cell(f.get("op")), text_cell(fmt_shape(str(f.get("shape") or ""))),
             num_cell(f.get("time_per_step_us"), ",.1f"), num_cell(f.get("pct_of_step"), ".2f"),
             num_cell(f.get("recoverable_us"), ",.1f"), text_cell(_made_of(f)),
             text_cell(fmt_source(str(f.get("source") or ""))), text_cell(f.get("fix")),
             text_cell(f.get("remedy"))] for f in findings]
    return table("table-findings", "Findings", columns, body)


def _made_of(f: Mapping[str, Any]) -> str:
    """The recoverable time's parts in us, written to add up to the recoverable column as printed."""
    parts = f.get("parts")
    total = f.get("recoverable_us")
    if not isinstance(parts, Mapping) or not parts or not isinstance(total, (int, float)):
        return ""
    names = [str(k) for k in parts]
    values = [float(v) if isinstance(v, (int, float)) else 0.0 for v in parts.values()]
    shown = round_parts(values, float(total), 1)
    return " + ".join(f"{PART_LABELS.get(n, n)} {t}" for n, t in zip(names, shown, strict=True))


def fixes_table(fixes: Sequence[Mapping[str, Any]]) -> Table:
    """Each offered fix: what its findings recover, what a what-if run says it costs here, the net with
    the range the measurements allow, whether that is a saving, and what was measured here (when, runs,
    interval)."""
    columns = (Column("fix"), Column("findings", True), Column("recovered (us/step)", True, "recoverable_us"),
               Column("cost here (us/step)", True, "cost_us"), Column("net (us/step)", True, "net_us"),
               Column("net range (us/step)", False, "net_range"), Column("promise", False, "verdict"),
               Column("measured here", False, "measured"))
    body = [[text_cell(p.get("fix")), num_cell(p.get("findings"), "d"), num_cell(p.get("recoverable_us"), ",.1f"),
             num_cell(p.get("cost_us"), ",.1f"), num_cell(p.get("net_us"), ",.1f"), text_cell(_net_range(p)),
             text_cell(p.get("verdict")), text_cell("; ".join(str(m) for m in p.get("measured") or []) or None)]
            for p in fixes]
    return table("table-fixes", "What each fix promises per step", columns, body)


def _net_range(p: Mapping[str, Any]) -> str | None:
    low, high = p.get("net_low_us"), p.get("net_high_us")
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return None
    return f"{low:,.1f} .. {high:,.1f}"


def ops_section(stats: Mapping[str, Any] | None, diagnosis: Mapping[str, Any] | None) -> Section:
    """The top ops (with findings), the bandwidth chart, the op table and the findings."""
    rows = list((stats or {}).get("rows") or [])
    findings = list((diagnosis or {}).get("findings") or [])
    items: list[Any] = []
    missing: list[str] = []
    if rows:
        items.append(_top_chart(rows, findings))
        peaks = (stats or {}).get("peaks")
        chart = _bandwidth_chart(rows, peaks) if isinstance(peaks, Mapping) else None
        if chart is not None:
            items.append(chart)
        else:
            kind = (stats or {}).get("device_kind") or (stats or {}).get("backend") or "this device"
            missing.append(f"achieved bandwidth against the chip's peak: no peak is known for {kind} "
                           "(XLA:CPU has none; TPU/GPU captures carry theirs)")
    elif stats is None:
        missing.append("top ops by time per step and bandwidth against peak: no op stats beside this diagnosis "
                       "(its capture is not here)")
    if diagnosis is not None:
        summary = str(diagnosis.get("summary") or "")
        if summary:
            items.append(Note(summary, "warn" if findings else ""))
        for f in findings:
            items.append(Note(f"{f.get('code')} {f.get('module')}/{f.get('op')}: {f.get('message')}"))
        if findings:
            items.append(findings_table(findings))
        fixes = list(diagnosis.get("fixes") or [])
        if any(float(p.get("cost_us") or 0.0) > 0 or p.get("measured") for p in fixes):
            # Only where a what-if priced a cost or measured a figure: otherwise each fix's promise is
            # its findings' sum.
            items.append(fixes_table(fixes))
    if rows:
        items.append(op_table(rows))
    return Section("ops", "The ops", tuple(items), tuple(missing))
