"""Names for a terminal or a plain-text log: shown, never sent (no escape sequence, no new line).

Two layers: :func:`term` on each name a renderer puts in a line (so a newline in an op name cannot
start a line of its own), and :class:`ShownConsole`, the console every command prints through, which
shows any control or bidi character left in the text it renders (rich's own styles, links and cursor
moves are segments of their own and pass).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment

from hlo_doctor.core.escape.text import has_hazards, visible, visible_keeping_lines

__all__ = ["ShownConsole", "term"]


def term(text: object) -> str:
    """``text`` as one line a terminal shows as written: control characters (ANSI/OSC sequences, CR,
    LF), bidi controls and line separators become ``\\x1b``, ``\\n``, ``\\u202e``...; a line that
    starts with ``::`` can then only be one the tool wrote."""
    return visible(str(text))


class ShownConsole(Console):
    """A rich console that never sends a control character it was given as text."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            Segment(visible_keeping_lines(seg.text), seg.style, seg.control)
            if not seg.control and has_hazards(seg.text) else seg
            for seg in buffer)
