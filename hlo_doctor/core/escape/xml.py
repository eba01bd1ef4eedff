"""XML 1.0 text and attribute values (JUnit): characters XML 1.0 forbids are replaced.

ElementTree escapes ``&``, ``<``, ``>`` and quotes, but writes a control character such as U+0001 as
it is, and no XML parser accepts the file then. Every character outside XML 1.0's ``Char`` production,
every other control, bidi and line-separator character, is shown as an escape (``\\x01``).
"""

from __future__ import annotations

import re

from hlo_doctor.core.escape.text import visible, visible_keeping_lines

__all__ = ["xml_lines", "xml_text"]

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: object) -> str:
    """``text`` as one line of characters XML 1.0 allows (ElementTree escapes the markup)."""
    shown = visible(str(text))
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", shown)


def xml_lines(text: object) -> str:
    """As :func:`xml_text`, but the line ends the tool wrote (a figure and its detail) are kept."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", visible_keeping_lines(str(text)))
