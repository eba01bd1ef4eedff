"""The op-stats table as Markdown, and the roofline cells every table of it shows.

Unknown roofline values (no FLOP count, no peak for the device) are blank, never a guess.
"""

from __future__ import annotations

import math
from typing import Any

from hlo_doctor.core.escape.markdown import md_cell
from hlo_doctor.core.format import fmt_source
from hlo_doctor.hlo.shape import fmt_shape
from hlo_doctor.opstats.roofline import peaks_line
from hlo_doctor.opstats.schema import OpStats

__all__ = ["ROOFLINE_HEADERS", "roofline_cells", "to_markdown"]

ROOFLINE_HEADERS: tuple[str, ...] = ("GiB/s", "% BW", "GFLOP/s", "% FLOP/s", "FLOP/B", "bound")
"""Headers of the roofline cells, in the order tables show them."""


def _num(value: Any, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{float(value):,.{digits}f}"


def roofline_cells(row: Any) -> dict[str, str]:
    """The roofline columns of one table row (a namedtuple or a mapping) as text, by header."""
    get = row.get if isinstance(row, dict) else lambda name: getattr(row, name)
    bound = get("bound_by")
    return {
        "GiB/s": _num(get("memory_bw_gibps"), 1),
        "% BW": _num(get("pct_of_peak_bw"), 1),
        "GFLOP/s": _num(get("flop_rate_gflops"), 1),
        "% FLOP/s": _num(get("pct_of_peak_flops"), 1),
        "FLOP/B": _num(get("intensity_flop_per_byte"), 2),
        "bound": "" if bound is None or (isinstance(bound, float) and math.isnan(bound)) else str(bound),
    }


def _cell(text: str) -> str:
    # Names and paths come from the trace: no pipe that ends the cell, no markup, no line break.
    return md_cell(text)


def to_markdown(stats: OpStats, top: int = 20) -> str:
    """The table's first ``top`` rows as a Markdown table, with its header and the peaks it uses."""
    kind = f" ({stats.device_kind})" if stats.device_kind and stats.device_kind != stats.backend else ""
    records = stats.records()  # (the rows as the table holds them: no pandas for them)
    lines = [
        f"# op stats: `{stats.source_path}`", "",
        f"{stats.backend}{kind} · {stats.num_steps} steps ({stats.step_source}) · mean step wall time "
        f"{stats.step_time_us:,.1f} µs · {len(records)} ops", "",
        peaks_line(stats.peaks, stats.backend), "",
    ]
    headers = ("#", "% step", "µs/step", "module", "op", "category", "shape", *ROOFLINE_HEADERS, "source")
    lines.append("| " + " | ".join(headers) + " |")
    right = {"#", "% step", "µs/step", *ROOFLINE_HEADERS} - {"bound"}
    lines.append("|" + "|".join("---:" if h in right else "---" for h in headers) + "|")
    for r in records[:top]:
        source = "" if not isinstance(r["source"], str) else fmt_source(r["source"])
        cells = {"#": str(r["rank"]), "% step": f"{r['pct_of_step']:.1f}", "µs/step": f"{r['time_per_step_us']:,.1f}",
                 "module": str(r["module"]), "op": str(r["op"]), "category": str(r["category"]),
                 "shape": fmt_shape(str(r["shape"])), "source": source, **roofline_cells(r)}
        lines.append("| " + " | ".join(_cell(cells[h]) for h in headers) + " |")
    if len(records) > top:
        lines += ["", f"{len(records) - top} more rows: `--top N`, or `--format csv/json`."]
    if stats.warnings:
        lines += ["", *(f"- note: {_cell(w)}" for w in stats.warnings)]
    return "\n".join(lines).rstrip() + "\n"
