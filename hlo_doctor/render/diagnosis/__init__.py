"""Renderers of a diagnosis: rich terminal report, JSON, Markdown (PR comments), SARIF 2.1.0.

Each takes a :class:`hlo_doctor.lint.Diagnosis` and returns text (or, for the terminal, a rich
renderable that the CLI prints). Nothing here prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hlo_doctor.render.diagnosis.json_doc import to_json
from hlo_doctor.render.diagnosis.lines import to_concise, to_github
from hlo_doctor.render.diagnosis.markdown import to_markdown
from hlo_doctor.render.diagnosis.sarif import to_sarif
from hlo_doctor.render.diagnosis.terminal import to_terminal

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis, RuleBook

FORMATS = ("table", "concise", "github", "json", "md", "sarif")
"""``--format`` values: ``table`` is for people (stderr; ``concise`` lines off a terminal), the others
are machine output."""


def to_text(diagnosis: Diagnosis, fmt: str, rulebook: RuleBook | None = None, *, source_root: Path | None = None,
            exit_code: int = 0, command_line: str = "") -> str:
    """Machine output of ``diagnosis`` in ``fmt`` (``concise``, ``github``, ``json``, ``md`` or ``sarif``)."""
    if fmt == "json":
        return to_json(diagnosis)
    if fmt == "md":
        return to_markdown(diagnosis)
    if fmt == "sarif":
        return to_sarif(diagnosis, rulebook, source_root=source_root, exit_code=exit_code,
                        command_line=command_line)
    if fmt == "concise":
        return to_concise(diagnosis, source_root)
    if fmt == "github":
        return to_github(diagnosis, source_root)
    raise ValueError(f"unknown format {fmt!r}")


__all__ = ["FORMATS", "to_concise", "to_github", "to_json", "to_markdown", "to_sarif", "to_terminal", "to_text"]
