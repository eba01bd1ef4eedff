"""Markdown report, for pull-request comments and CI summaries."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from hlo_doctor.core.format import fmt_pct, fmt_source, fmt_us
from hlo_doctor.hlo.shape import fmt_shape

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "-"


def to_markdown(diagnosis: Diagnosis) -> str:
    """A heading, the summary line, a findings table and one detail block per finding."""
    out = ["## hlo-doctor diagnose", "", f"**{diagnosis.summary_line()}**", ""]
    meta = [f"input `{diagnosis.origin}`"]
    if diagnosis.backend:
        meta.append(f"backend {diagnosis.backend}")
    if diagnosis.num_steps:
        meta.append(f"{diagnosis.num_steps} steps")
    meta.append(f"rules run: {', '.join(diagnosis.rules_run) or 'none'}")
    out += [" · ".join(meta), ""]
    if diagnosis.fixes_line():
        out += [re.sub(r"([\\`*_|])", r"\\\1", diagnosis.fixes_line()), ""]
    if diagnosis.compile_line():
        # Module names hold underscores: escaped, not read as emphasis.
        out += [re.sub(r"([\\`*_|])", r"\\\1", diagnosis.compile_line()), ""]
    if diagnosis.rules_skipped:
        out += ["Skipped: " + "; ".join(f"{c} ({r})" for c, r in diagnosis.rules_skipped), ""]
    if not diagnosis.findings:
        return "\n".join(out) + "\n"
    out += ["| Code | Severity | Module | Op | Shape | Time/step | % of step | Recoverable | Source | Fix |",
            "|---|---|---|---|---|---:|---:|---:|---|---|"]
    for f in diagnosis.findings:
        out.append("| " + " | ".join(_cell(x) for x in (
            f.code, str(f.severity), f.module, f"`{f.op}`" if f.op else "", f"`{fmt_shape(f.shape)}`" if f.shape else "",
            fmt_us(f.time_per_step_us), fmt_pct(f.pct_of_step), fmt_us(f.recoverable_us),
            f"`{fmt_source(f.source)}`" if f.source else "", f"`{f.fix}`" if f.fix else "")) + " |")
    out.append("")
    for f in diagnosis.findings:
        out += [f"### {f.code} {f.name}: `{f.op or f.module or f.source}`", "", f.message, ""]
        if f.evidence:
            out += ["```", *f.evidence, "```", ""]
        if f.fix:
            how = dict(f.extra).get("fix_command") or f"hlo-doctor apply-fix {f.fix} --target PATH"
            out += [f"Fix: `{how}`", ""]
    return "\n".join(out)
