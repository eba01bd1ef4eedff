"""The report people read: a rich table of findings, the details, and the summary line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hlo_doctor.core.escape.terminal import term
from hlo_doctor.core.format import fmt_pct, fmt_source, fmt_us, recoverable_sum
from hlo_doctor.core.model import Severity
from hlo_doctor.hlo.shape import fmt_shape

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis

_STYLE = {Severity.ERROR: "bold red", Severity.HIGH: "red", Severity.MEDIUM: "yellow",
          Severity.LOW: "cyan", Severity.INFO: "dim"}


def to_terminal(diagnosis: Diagnosis, *, details: bool = True) -> RenderableType:
    """A rich renderable: findings table, then (with ``details``) message, evidence and fix per finding."""
    parts: list[RenderableType] = []
    # term(): names, paths and messages come from the capture; a newline in one must not start a line.
    head = Text(f"hlo-doctor diagnose {term(diagnosis.origin)}", style="bold")
    meta = [diagnosis.kind] + ([diagnosis.backend] if diagnosis.backend else [])
    if diagnosis.num_steps:
        meta.append(f"{diagnosis.num_steps} steps")
    if diagnosis.step_time_us:
        meta.append(f"step {fmt_us(diagnosis.step_time_us)}")
    meta.append(f"{len(diagnosis.modules)} modules")
    head.append("  (" + ", ".join(meta) + ")", style="dim")
    parts.append(head)
    if diagnosis.findings:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        # The fix id and full paths are in the details below; the table stays one line per finding.
        for col, justify, wrap in (("code", "left", False), ("sev", "left", False), ("module", "left", True),
                                   ("op", "left", True), ("shape", "left", True), ("time/step", "right", False),
                                   ("% step", "right", False), ("recoverable", "right", False),
                                   ("source", "left", True)):
            table.add_column(col, justify=justify, no_wrap=not wrap, overflow="fold")  # type: ignore[arg-type]
        for f in diagnosis.findings:
            table.add_row(
                # Text, not str: names and paths come from the user's program and are never markup.
                Text(term(f.code)), Text(str(f.severity), style=_STYLE.get(f.severity, "")), Text(term(f.module)),
                Text(term(f.op)), Text(term(fmt_shape(f.shape))), fmt_us(f.time_per_step_us), fmt_pct(f.pct_of_step),
                fmt_us(f.recoverable_us), Text(term(fmt_source(f.source))),
            )
        parts.append(table)
        if details:
            for f in diagnosis.findings:
                line = Text()
                line.append(f"{term(f.code)} ", style=_STYLE.get(f.severity, "bold"))
                line.append(term(f.name), style="bold")
                if f.op:
                    line.append(f"  {term(f.module)}/{term(f.op)}", style="dim")
                parts.append(line)
                parts.append(Text("  " + term(f.message)))
                if f.parts:
                    parts.append(Text(f"  recoverable {recoverable_sum(f)}", style="bold"))
                for ev in f.evidence[:4]:
                    parts.append(Text("    " + term(ev), style="dim", no_wrap=True, overflow="ellipsis"))
                if f.source:
                    parts.append(Text(f"  at {term(fmt_source(f.source))}", style="dim"))
                if f.fix:
                    how = dict(f.extra).get("fix_command") or f"hlo-doctor apply-fix {f.fix} --target PATH"
                    parts.append(Text(f"  fixable: {term(how)}", style="green"))
                if f.remedy:
                    parts.append(Text(f"  remedy: {term(f.remedy)}", style="green"))
    if diagnosis.rules_skipped:
        parts.append(Text("skipped: " + term("; ".join(f"{c} ({r})" for c, r in diagnosis.rules_skipped)),
                          style="dim"))
    style = "bold green" if not diagnosis.findings else "bold"
    parts.append(Text(term(diagnosis.summary_line()), style=style))
    if diagnosis.fixes_line():
        parts.append(Text(term(diagnosis.fixes_line()), style="bold"))
    if diagnosis.compiler_inserted_line():
        parts.append(Text(term(diagnosis.compiler_inserted_line()), style="dim"))
    if diagnosis.stage_line:
        parts.append(Text(term(diagnosis.stage_line), style="dim"))
    if diagnosis.compile_line():
        parts.append(Text(term(diagnosis.compile_line()), style="dim"))
    return Group(*parts)
