"""What every format's escaping shares: characters no reader should receive from a name, shown.

A name, path or message from a capture may hold C0 and C1 control characters (ANSI and OSC escape
sequences, CR that overwrites a line, LF that starts one), DEL, bidi controls (U+202A-U+202E,
U+2066-U+2069, U+200E/U+200F/U+061C, which reorder what a reader sees) and line separators (U+2028,
U+2029, U+0085, which some viewers and JavaScript engines treat as line ends). ``visible`` writes
each as an escape a person can read (``\\n``, ``\\x1b``, ``\\u202e``); everything else is kept.
"""

from __future__ import annotations

import re

__all__ = ["BIDI", "HAZARDS", "has_hazards", "visible", "visible_keeping_lines"]

BIDI = frozenset({*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C})
"""Bidirectional formatting characters (embeddings, overrides, isolates, marks)."""

_LINE_SEPARATORS = frozenset({0x2028, 0x2029, 0x85})
_NAMED = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def _shown(cp: int) -> str:
    return _NAMED.get(cp) or (f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}")


_SURROGATES = range(0xD800, 0xE000)
"""Lone surrogates (``\\ud800`` in a JSON string): no UTF-8 writer accepts them."""

HAZARDS = frozenset({*range(0x20), 0x7F, *range(0x80, 0xA0), *BIDI, *_LINE_SEPARATORS, 0xFEFF, *_SURROGATES})
"""Every character :func:`visible` rewrites (the byte-order mark included: invisible mid-text)."""

_TABLE = {cp: _shown(cp) for cp in HAZARDS}
_TABLE_KEEP_LINES = {cp: s for cp, s in _TABLE.items() if cp not in (0x0A, 0x09)}
_ANY = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]")


def has_hazards(text: str) -> bool:
    """Whether ``text`` holds a character :func:`visible` would rewrite."""
    return _ANY.search(text) is not None


def visible(text: str) -> str:
    """``text`` with every control, bidi and line-separator character written as an escape."""
    # The search first: almost every name is clean, and a search is cheaper than a translate.
    return text.translate(_TABLE) if _ANY.search(text) else text


def visible_keeping_lines(text: str) -> str:
    """As :func:`visible`, but LF and tab are kept: for text the tool wrote in several lines (a
    message with a hint below it, rich's own layout), where each name in it was escaped already."""
    return text.translate(_TABLE_KEEP_LINES) if _ANY.search(text) else text
