"""Markdown report, for pull-request comments and CI summaries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlo_doctor.core.escape.markdown import md_cell, md_cell_code, md_code, md_fence, md_text
from hlo_doctor.core.format import fmt_pct, fmt_source, fmt_us, recoverable_sum
from hlo_doctor.hlo.shape import fmt_shape

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis


def _cell(text: str) -> str:
    return md_cell(text) or "-"


def _code_cell(text: str) -> str:
    return md_cell_code(text) or "-"


def to_markdown(diagnosis: Diagnosis) -> str:
    """A heading, the summary line, a findings table and one detail block per finding."""
    out = ["## hlo-doctor diagnose", "", f"**{diagnosis.summary_line()}**", ""]
    meta = [f"input {md_code(diagnosis.origin)}"]
    if diagnosis.backend:
        meta.append(f"backend {md_text(diagnosis.backend)}")
    if diagnosis.num_steps:
        meta.append(f"{diagnosis.num_steps} steps")
    meta.append(f"rules run: {md_text(', '.join(diagnosis.rules_run)) or 'none'}")
    out += [" · ".join(meta), ""]
    if diagnosis.fixes_line():
        out += [md_text(diagnosis.fixes_line()), ""]
    if diagnosis.compile_line():
        # Module names hold underscores: escaped, not read as emphasis.
        out += [md_text(diagnosis.compile_line()), ""]
    if diagnosis.rules_skipped:
        out += ["Skipped: " + md_text("; ".join(f"{c} ({r})" for c, r in diagnosis.rules_skipped)), ""]
    if not diagnosis.findings:
        return "\n".join(out) + "\n"
    out += ["| Code | Severity | Module | Op | Shape | Time/step | % of step | Recoverable | Source | Fix |",
            "|---|---|---|---|---|---:|---:|---:|---|---|"]
    for f in diagnosis.findings:
        out.append("| " + " | ".join((
            _cell(f.code), _cell(str(f.severity)), _cell(f.module), _code_cell(f.op), _code_cell(fmt_shape(f.shape)),
            _cell(fmt_us(f.time_per_step_us)), _cell(fmt_pct(f.pct_of_step)), _cell(fmt_us(f.recoverable_us)),
            _code_cell(fmt_source(f.source)) if f.source else "-", _code_cell(f.fix))) + " |")
    out.append("")
    for f in diagnosis.findings:
        out += [f"### {md_text(f.code)} {md_text(f.name)}: {md_code(f.op or f.module or f.source)}", "",
                md_text(f.message), ""]
        if f.parts:
            # Figures and part names of our own, nothing from the capture: written as they are.
            out += [f"Recoverable: {recoverable_sum(f)}", ""]
        if f.evidence:
            out += [*md_fence(f.evidence), ""]
        if f.fix:
            how = dict(f.extra).get("fix_command") or f"hlo-doctor apply-fix {f.fix} --target PATH"
            out += [f"Fix: {md_code(how)}", ""]
        if f.remedy:
            out += [f"Remedy: {md_text(f.remedy)}", ""]
    return "\n".join(out)
