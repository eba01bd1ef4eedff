"""GitHub Actions workflow commands: their own escaping of data and properties.

GitHub's runner reads a workflow command from any line of stdout or stderr that starts with ``::``.
Its documented escaping: in the message (data) ``%`` -> ``%25``, CR -> ``%0D``, LF -> ``%0A``; in a
property value also ``:`` -> ``%3A`` and ``,`` -> ``%2C``. Other control and bidi characters are
shown as escapes first (the annotation is read by people).
"""

from __future__ import annotations

from hlo_doctor.core.escape.text import BIDI, HAZARDS, visible

__all__ = ["gh_data", "gh_property"]

_SHOW = {cp: visible(chr(cp)) for cp in HAZARDS if cp not in (0x0A, 0x0D)}


def gh_data(text: str) -> str:
    """A workflow command's message: one line whatever ``text`` holds."""
    return text.translate(_SHOW).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def gh_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``): cannot end the property list."""
    return gh_data(text).replace(":", "%3A").replace(",", "%2C")


assert not (BIDI - HAZARDS)  # every bidi control is shown, not sent
