"""A capture's memory (:class:`~hlo_doctor.memory.MemoryReport`): the terminal table, JSON, Markdown
and CSV. Programs of one step side by side (those that ran in the steps first), then the largest
buffers live at each one's peak. Every name and path comes from the capture: escaped per format."""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.format import fmt_bytes, fmt_source

if TYPE_CHECKING:
    from rich.console import RenderableType

    from hlo_doctor.memory import MemoryReport, ProgramMemory

__all__ = ["JSON_SCHEMA", "to_csv", "to_json", "to_markdown", "to_terminal"]

JSON_SCHEMA = "hlo-doctor.memory/1"
CSV_COLUMNS = ("module", "program_id", "runs_per_step", "peak_bytes", "heap_peak_bytes", "argument_bytes",
               "output_bytes", "alias_bytes", "temporary_bytes", "constant_bytes", "peak_instruction",
               "largest_at_peak", "largest_at_peak_bytes", "largest_at_peak_source", "error")


def _runs(p: ProgramMemory) -> str:
    return "-" if p.runs_per_step is None else f"{p.runs_per_step:g}"


def _shown(report: MemoryReport, all_programs: bool) -> tuple[ProgramMemory, ...]:
    return report.programs if all_programs else report.step_programs


def _header(report: MemoryReport, shown: int) -> str:
    where = report.backend + (f" ({report.device_kind})" if report.device_kind else "")
    total = len(report.programs)
    scope = f"{shown} of {total} programs (those that ran in the steps)" if shown < total else f"{total} programs"
    mem = f" · device memory {fmt_bytes(report.device_memory_bytes)}" if report.device_memory_bytes else ""
    return (f"{where + ' · ' if where else ''}{scope}{mem}")


def to_json(report: MemoryReport, *, heap: bool = True) -> str:
    """The report as JSON (``schema`` ``hlo-doctor.memory/1``): every program, its buffers at the peak,
    its allocations and (unless ``heap`` is False) the heap over program order."""
    return json.dumps({"schema": JSON_SCHEMA, **report.to_dict(heap=heap)}, indent=2)


def _csv_row(p: ProgramMemory) -> list[Any]:
    top = p.buffers_at_peak[0] if p.buffers_at_peak else None
    return [p.module, "" if p.program_id is None else p.program_id,
            "" if p.runs_per_step is None else p.runs_per_step, p.peak_bytes, p.heap_peak_bytes, p.argument_bytes,
            p.output_bytes, p.alias_bytes, p.temporary_bytes, p.constant_bytes, p.peak_instruction,
            top.instruction if top else "", top.size_bytes if top else "", top.source if top else "", p.error]


def _csv_safe(value: Any) -> Any:
    # A cell a spreadsheet would run as a formula (=, +, -, @ first) is quoted as text.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def to_csv(report: MemoryReport, *, all_programs: bool = True) -> str:
    """One row per program (columns :data:`CSV_COLUMNS`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for p in _shown(report, all_programs):
        w.writerow([_csv_safe(v) for v in _csv_row(p)])
    return buf.getvalue()


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("<", "&lt;") \
        .replace("\n", " ") or "-"


def to_markdown(report: MemoryReport, *, all_programs: bool = False, buffers: int = 5) -> str:
    """A heading, the programs' table and, per program, the largest buffers at its peak."""
    shown = _shown(report, all_programs)
    lines = [f"# memory: {_md(report.origin)}", "", _md(_header(report, len(shown))), ""]
    lines += ["| program | runs/step | peak | arguments | outputs | donated | temporaries | heap peak | peak at |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in shown:
        lines.append(f"| {_md(p.label)} | {_runs(p)} | {fmt_bytes(p.peak_bytes)} | {fmt_bytes(p.argument_bytes)} | "
                     f"{fmt_bytes(p.output_bytes)} | {fmt_bytes(p.alias_bytes)} | {fmt_bytes(p.temporary_bytes)} | "
                     f"{fmt_bytes(p.heap_peak_bytes)} | {_md(p.error or p.peak_instruction)} |")
    for p in shown:
        if not p.buffers_at_peak or buffers <= 0:
            continue
        lines += ["", f"## {_md(p.label)}: live at the peak ({fmt_bytes(p.peak_bytes)})", "",
                  "| size | kind | op | shape | source |", "|---:|---|---|---|---|"]
        for b in p.buffers_at_peak[:buffers]:
            kind = b.category + (" (donated)" if b.aliased else "")
            lines.append(f"| {fmt_bytes(b.size_bytes)} | {kind} | {_md(b.instruction)} | {_md(b.shape)} | "
                         f"{_md(fmt_source(b.source))} |")
    _notes(report, lines.append, _md)
    return "\n".join(lines) + "\n"


def _notes(report: MemoryReport, emit: Any, esc: Any) -> None:
    if report.missing:
        emit("")
        emit(esc(f"without a buffer assignment: {', '.join(report.missing[:10])}"
                 + (" ..." if len(report.missing) > 10 else "")))
    for w in report.warnings:
        emit("")
        emit(esc(w))


def to_terminal(report: MemoryReport, *, all_programs: bool = False, buffers: int = 5) -> RenderableType:
    """The people's view: the programs' table, then the largest buffers at the first programs' peaks."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    shown = _shown(report, all_programs)
    table = Table(title=Text(f"memory: {report.origin}"), caption=Text(_header(report, len(shown))),
                  title_justify="left", caption_justify="left")
    for col, right in (("program", False), ("runs/step", True), ("peak", True), ("arguments", True),
                       ("outputs", True), ("donated", True), ("temporaries", True), ("heap peak", True),
                       ("peak at", False)):
        table.add_column(col, justify="right" if right else "left", overflow="fold")
    for p in shown:
        table.add_row(Text(p.label), _runs(p), fmt_bytes(p.peak_bytes), fmt_bytes(p.argument_bytes),
                      fmt_bytes(p.output_bytes), fmt_bytes(p.alias_bytes), fmt_bytes(p.temporary_bytes),
                      fmt_bytes(p.heap_peak_bytes), Text(p.error or p.peak_instruction))
    parts: list[Any] = [table]
    for p in shown[:3]:
        if not p.buffers_at_peak or buffers <= 0:
            continue
        t = Table(title=Text(f"{p.label}: live at the peak ({fmt_bytes(p.peak_bytes)})"), title_justify="left")
        for col in ("size", "kind", "op", "shape", "source"):
            t.add_column(col, justify="right" if col == "size" else "left", overflow="fold")
        for b in p.buffers_at_peak[:buffers]:
            t.add_row(fmt_bytes(b.size_bytes), b.category + (" (donated)" if b.aliased else ""),
                      Text(b.instruction), Text(b.shape), Text(fmt_source(b.source)))
        parts.append(t)
    notes: list[str] = []
    _notes(report, notes.append, lambda s: s)
    parts.extend(Text(n, style="dim") for n in notes if n)
    if len(shown) < len(report.programs):
        parts.append(Text(f"{len(report.programs) - len(shown)} programs outside the steps: --all", style="dim"))
    return Group(*parts)
