"""CSV cells that a spreadsheet opens as data, never as a formula.

A cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a CR is read as a formula by Excel,
LibreOffice and Google Sheets (``=cmd|' /C calc'!A0``); such a text cell gets a leading ``'``
(OWASP's advice), and control and bidi characters are shown as escapes.
"""

from __future__ import annotations

from hlo_doctor.core.escape.text import visible

__all__ = ["csv_cell"]

_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """A text cell: no formula, one line."""
    return "'" + visible(text) if text.startswith(_FORMULA) else visible(text)
