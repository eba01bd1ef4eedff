"""Markdown (GitHub's flavour, CommonMark underneath): text, inline code, table cells, code blocks.

A name must never become markup: no raw HTML (``<img onerror=...>``), no heading, link, emphasis or
list it starts, no line break inside a table cell (a bare CR ends a line in CommonMark too), no pipe
that splits a cell, no backtick run that closes a code span or a fence early.
"""

from __future__ import annotations

import re

from hlo_doctor.core.escape.text import visible

__all__ = ["md_cell", "md_cell_code", "md_code", "md_fence", "md_text"]

# Every character that can open inline markup, raw HTML, an entity or GitHub's math; CommonMark allows a
# backslash before any ASCII punctuation, so each renders as itself.
# An underscore between two letters or digits (``jit_sample``) opens nothing, nor do brackets without a
# ``(`` after them (a shape's ``f32[64]``; no reference definition can come from a name): kept as written.
_INLINE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|(?<=\])\(|[\\`*<>|~&$]")
# What opens a block at the start of a line: a heading, a quote, a list item, a setext underline.
_BLOCK_START = re.compile(r"^(\s*)([#>+=-]|\d+[.)])")
_TICKS = re.compile(r"`+")


def md_text(text: object) -> str:
    """Text that renders as written: one line, each character that could open markup or raw HTML
    backslash-escaped, and what would open a block where the text starts a line."""
    return _BLOCK_START.sub(_escape_start, _INLINE.sub(r"\\\g<0>", visible(str(text))))


def md_cell(text: object) -> str:
    """Text in a table cell: as :func:`md_text` inline (a cell starts no block), pipes escaped."""
    return _INLINE.sub(r"\\\g<0>", visible(str(text)))


def _escape_start(m: re.Match[str]) -> str:
    lead, mark = m.group(1), m.group(2)
    return f"{lead}{mark[:-1]}\\{mark[-1]}" if mark[0].isdigit() else f"{lead}\\{mark}"


def md_code(text: object) -> str:
    """An inline code span holding ``text`` on one line: the fence is one backtick longer than the
    longest run inside, padded where the text starts or ends with a backtick (CommonMark)."""
    s = visible(str(text))
    if not s:
        return ""
    longest = max((len(m.group()) for m in _TICKS.finditer(s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ")) else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_cell_code(text: object) -> str:
    """:func:`md_code` for a table cell: a pipe splits a cell even inside a code span (GFM), so it is
    escaped there too (the table renders it as ``|``)."""
    return md_code(text).replace("|", "\\|")


def md_fence(lines: list[str] | tuple[str, ...]) -> list[str]:
    """A fenced code block of ``lines`` (each made one line): the fence is longer than any backtick run."""
    shown = [visible(line) for line in lines]
    longest = max((len(m.group()) for line in shown for m in _TICKS.finditer(line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *shown, fence]
