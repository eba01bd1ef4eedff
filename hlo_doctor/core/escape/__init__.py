"""Every string that came from a capture or an artifact, escaped for the format it is written in.

One module per output format; a renderer calls the one of its format on each name, path and message
it did not write itself. What they share (``text``): control characters, bidi controls and line
separators are shown as ``\\n``, ``\\x1b``, ``\\u202e``..., never sent, so no name can start a line,
move the cursor, open a link or reorder what a reader sees.
"""

from __future__ import annotations

from hlo_doctor.core.escape.text import has_hazards, visible

__all__ = ["has_hazards", "visible"]
