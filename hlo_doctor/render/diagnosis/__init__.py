"""Renderers of a diagnosis: rich terminal report, JSON, Markdown (PR comments), SARIF 2.1.0.

Each takes a :class:`hlo_doctor.diagnose.Diagnosis` and returns text (or, for the terminal, a rich
renderable that the CLI prints). Nothing here prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlo_doctor.render.diagnosis.json_doc import to_json
from hlo_doctor.render.diagnosis.markdown import to_markdown
from hlo_doctor.render.diagnosis.sarif import to_sarif
from hlo_doctor.render.diagnosis.terminal import to_terminal

if TYPE_CHECKING:
    from hlo_doctor.diagnose import Diagnosis
    from hlo_doctor.rulebook import RuleBook

FORMATS = ("rich", "json", "md", "sarif")
"""``--format`` values; ``rich`` is for people (stderr), the others are machine output."""


def to_text(diagnosis: Diagnosis, fmt: str, rulebook: RuleBook | None = None) -> str:
    """Machine output of ``diagnosis`` in ``fmt`` (``json``, ``md`` or ``sarif``)."""
    if fmt == "json":
        return to_json(diagnosis)
    if fmt == "md":
        return to_markdown(diagnosis)
    if fmt == "sarif":
        return to_sarif(diagnosis, rulebook)
    raise ValueError(f"unknown format {fmt!r}")


__all__ = ["FORMATS", "to_json", "to_markdown", "to_sarif", "to_terminal", "to_text"]
