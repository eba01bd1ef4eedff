"""Renderers of a diagnosis: rich terminal report, JSON, Markdown (PR comments), SARIF 2.1.0.

Each renderer takes a :class:`hlo_doctor.lint.Diagnosis` and returns text (or, for the
terminal, a rich renderable that the CLI prints). Nothing here prints. Other commands may reuse the
finding formatters (:func:`fmt_us`, :func:`fmt_pct`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlo_doctor.report.common import fmt_pct, fmt_us, split_source
from hlo_doctor.report.json_report import render_json
from hlo_doctor.report.markdown import render_markdown
from hlo_doctor.report.sarif import render_sarif
from hlo_doctor.report.terminal import render_terminal

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis, RuleBook

FORMATS = ("rich", "json", "md", "sarif")
"""``--format`` values; ``rich`` is for people (stderr), the others are machine output."""


def render_text(diagnosis: Diagnosis, fmt: str, rulebook: RuleBook | None = None) -> str:
    """Machine output of ``diagnosis`` in ``fmt`` (``json``, ``md`` or ``sarif``)."""
    if fmt == "json":
        return render_json(diagnosis)
    if fmt == "md":
        return render_markdown(diagnosis)
    if fmt == "sarif":
        return render_sarif(diagnosis, rulebook)
    raise ValueError(f"unknown format {fmt!r}")


__all__ = ["FORMATS", "fmt_pct", "fmt_us", "render_json", "render_markdown", "render_sarif",
           "render_terminal", "render_text", "split_source"]
