"""The step breakdown (:mod:`hlo_doctor.opstats.breakdown`) as a terminal table, Markdown and JSON.

Every format shows the same sections: per device (step wall time, busy, idle, idle %, and xprof's
device idle % over the device's span), what the host did while the device idled, the steps, and the
source lines that filled the idle time; where several threads of a host dispatch programs, a row per
thread and the other threads' lines (:mod:`hlo_doctor.render.breakdown_threads`).
"""

from __future__ import annotations

import json

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hlo_doctor.core.escape.markdown import md_cell
from hlo_doctor.core.format import fmt_pct, fmt_source, fmt_us, json_safe
from hlo_doctor.opstats.breakdown import HOST_KINDS, StepBreakdown
from hlo_doctor.render.breakdown_threads import (
    OTHER_LINE_COLUMNS,
    THREAD_COLUMNS,
    other_line_rows,
    other_lines,
    thread_rows,
    threads_line,
)

MAX_STEPS = 20
"""Steps listed in the table and Markdown (JSON holds every one)."""
MAX_LINES = 15
_KIND_WORDS = {"python": "Python", "dispatch": "dispatch", "compile": "compile", "wait": "waiting (block_until_ready)",
               "untraced": "untraced"}


def _header(b: StepBreakdown) -> list[str]:
    """The header: the step, what the host ran while the device idled, the definitions, and (only
    where a host's threads run at once) the line that says so."""
    host = " · ".join(f"{k} {fmt_us(v)}" for k, v in b.idle_by_kind().items() if v > 0) or "-"
    threads = threads_line(b)
    return [
        f"{len(b.steps)} device steps (steps from {b.step_source}) · mean step {fmt_us(b.wall_us)} · device busy "
        f"{fmt_us(b.busy_us)} · idle {fmt_us(b.idle_us)} ({fmt_pct(b.idle_pct)})",
        f"while the device idles, the host runs (per step): {host}",
        b.busy_definition + "; idle = step wall time - busy",
        *([threads] if threads else []),
    ]


def _device_rows(b: StepBreakdown) -> list[list[str]]:
    windows = {(w.host, w.device): w for w in b.windows}
    rows = []
    for d in b.per_device():
        w = windows.get((d["host"], d["device"]))
        rows.append([f"{d['host']} {d['device']}", str(d["steps"]), fmt_us(d["wall_us"]), fmt_us(d["busy_us"]),
                     fmt_us(d["idle_us"]), fmt_pct(d["idle_pct"]), fmt_pct(w.idle_pct) if w else "-"])
    return rows


_DEVICE_COLUMNS = ("device", "steps", "step", "busy", "idle", "idle %", "idle % (first op to last)")
_STEP_COLUMNS = ("device", "step", "wall", "busy", "idle", *(f"idle: {k}" for k in HOST_KINDS[:-1]))
_LINE_COLUMNS = ("idle/step", "host/step", "kind", "where (first frame outside the frameworks)", "what", "source")


def _step_rows(b: StepBreakdown) -> list[list[str]]:
    return [[s.device, str(s.step), fmt_us(s.wall_us), fmt_us(s.busy_us), fmt_us(s.idle_us),
             *(fmt_us(s.idle_by_kind.get(k, 0.0)) for k in HOST_KINDS[:-1])] for s in b.steps[:MAX_STEPS]]


def _line_rows(b: StepBreakdown) -> list[list[str]]:
    return [[fmt_us(x.idle_us), fmt_us(x.host_us), _KIND_WORDS.get(x.kind, x.kind), x.where or "(frameworks only)",
             x.target, fmt_source(x.source) if x.source else ""] for x in b.lines[:MAX_LINES]]


def _table(columns: tuple[str, ...], rows: list[list[str]]) -> Table:
    t = Table(show_lines=False, header_style="bold")
    for i, name in enumerate(columns):
        t.add_column(name, justify="right" if rows and rows[0][i][:1].isdigit() else "left", overflow="fold")
    for row in rows:
        t.add_row(*(Text(cell) for cell in row))
    return t


def to_terminal(b: StepBreakdown, source_path: str = "") -> RenderableType:
    """The breakdown for people: header lines, devices, steps, the lines that filled the idle time."""
    parts: list[RenderableType] = [Text.from_markup(f"[bold]step breakdown[/] {escape(source_path)}")]
    head = _header(b)
    parts += [Text(head[0]), Text(head[1]), Text(head[2], style="dim"), *(Text(h) for h in head[3:])]
    parts.append(_table(_DEVICE_COLUMNS, _device_rows(b)))
    parts.append(_table(_STEP_COLUMNS, _step_rows(b)))
    if len(b.steps) > MAX_STEPS:
        parts.append(Text(f"{len(b.steps) - MAX_STEPS} more steps: --breakdown json", style="dim"))
    if b.lines:
        parts.append(Text("what the host ran while the device idled, per step:"))
        parts.append(_table(_LINE_COLUMNS, _line_rows(b)))
    threads = thread_rows(b)
    if threads:
        parts.append(Text("the threads that dispatch programs, per device step (host: what the thread did; idle: "
                          "the device's idle time while it did it):"))
        parts.append(_table(THREAD_COLUMNS, threads))
        others = other_line_rows(b, _KIND_WORDS, MAX_LINES)
        if others:
            parts.append(Text("what the other threads ran while the device idled, per step:"))
            parts.append(_table(OTHER_LINE_COLUMNS, others))
            if len(other_lines(b)) > MAX_LINES:
                parts.append(Text(f"{len(other_lines(b)) - MAX_LINES} more lines: --breakdown csv", style="dim"))
    parts.extend(Text.from_markup(f"[yellow]note:[/] {escape(n)}") for n in b.notes)
    return Group(*parts)


def _md_table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return md_cell(text)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(b: StepBreakdown, source_path: str = "") -> str:
    """The breakdown as Markdown: the same sections as :func:`to_terminal`."""
    head = _header(b)
    out = [f"## Step breakdown{f' of `{source_path}`' if source_path else ''}", "", head[0], "", head[1], "",
           f"_{head[2]}_", "", *(x for h in head[3:] for x in (h, "")),
           _md_table(_DEVICE_COLUMNS, _device_rows(b)), "", "### Steps", "",
           _md_table(_STEP_COLUMNS, _step_rows(b))]
    if b.lines:
        out += ["", "### What the host ran while the device idled (per step)", "", _md_table(_LINE_COLUMNS, _line_rows(b))]
    threads = thread_rows(b)
    if threads:
        out += ["", "### The threads that dispatch programs (per device step)", "",
                "_host: what the thread did; idle: the device's idle time while it did it_", "",
                _md_table(THREAD_COLUMNS, threads)]
        others = other_line_rows(b, _KIND_WORDS, MAX_LINES)
        if others:
            out += ["", "### What the other threads ran while the device idled (per step)", "",
                    _md_table(OTHER_LINE_COLUMNS, others)]
    if b.notes:
        out += [""] + [f"- note: {n}" for n in b.notes]
    return "\n".join(out) + "\n"


def to_json(b: StepBreakdown) -> str:
    """The breakdown as JSON (:meth:`StepBreakdown.to_dict`)."""
    return json.dumps(json_safe(b.to_dict()), indent=1) + "\n"
