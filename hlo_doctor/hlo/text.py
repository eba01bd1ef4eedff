"""Bracket- and quote-aware scanning of HLO text: statements, closing brackets, top-level commas.

XLA prints strings (``backend_config``, ``op_name``...) that may hold brackets, commas and newlines;
everything here skips over them. The scans jump between special characters with a regex rather
than stepping through every character in Python.
"""

from __future__ import annotations

import re
from itertools import accumulate

# What the scanner stops at: quotes, brackets, newlines and comments. Everything else is skipped by
# the regex engine, not by a Python loop.
_SPECIAL = re.compile(r'["\n(){}\[\]]|/\*')
_BRACKETS = re.compile(r'["(){}\[\]]')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
# One token per bracket (and comma), a whole string literal as one token, a lone quote where a string
# is not closed: a single pass of ``finditer`` rather than a search and a string match per stop.
_BRACKET_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|["(){}\[\]]', re.S)
_SPLIT_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|["(){}\[\],]', re.S)
_STRING_OR_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|/\*.*?\*/', re.S)


_NOT_BRACKET = re.compile(r"[^(){}\[\]]+")
_STEP = {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}


class _Truncated(ValueError):
    """The text ends inside a string, a bracket or a computation."""


def _skip_string(text: str, pos: int) -> int:
    """Index just past the string literal starting at ``text[pos]`` (a quote)."""
    m = _STRING.match(text, pos)
    if not m:
        raise _Truncated("a string is not closed")
    return m.end()


def _statement_end(text: str, pos: int) -> tuple[int, int]:
    """``(end, depth)`` of the statement starting at ``pos``.

    The statement ends at a newline outside brackets and strings (``end`` is the newline's index, or
    the text's length), or at a closing bracket that closes more than it opened (``depth`` -1: the
    ``}`` closing a computation).
    """
    # Most statements are one line: when that line, its strings taken out, has no quote or comment
    # left and its brackets balance without ever closing more than they opened, it is the statement.
    # Anything else (a string or a bracket running past the newline, a comment, an unopened bracket)
    # takes the scan below, which decides it.
    end = text.find("\n", pos)
    if end >= 0:
        line = text[pos:end]
        if '"' in line:
            line = _STRING.sub("", line)
        if '"' not in line and "/*" not in line:
            steps = _NOT_BRACKET.sub("", line)
            if not steps:
                return end, 0
            depths = list(accumulate(map(_STEP.__getitem__, steps)))
            if depths[-1] == 0 and min(depths) >= 0:
                return end, 0
    depth = 0
    n = len(text)
    while True:
        m = _SPECIAL.search(text, pos)
        if m is None:
            if depth:
                raise _Truncated("a bracket is not closed")
            return n, 0
        c = m.group()
        i = m.start()
        if c == '"':
            pos = _skip_string(text, i)
            continue
        if c == "/*":
            close = text.find("*/", i + 2)
            if close < 0:
                raise _Truncated("a comment is not closed")
            pos = close + 2
            continue
        if c == "\n":
            if depth == 0:
                return i, 0
        elif c in "({[":
            depth += 1
        else:
            depth -= 1
            if depth < 0:
                return i, -1
        pos = i + 1


def _find_closing(text: str, start: int, open_ch: str = "(", close_ch: str = ")") -> int:
    """Index of the bracket closing ``text[start]`` (which is ``open_ch``), skipping quotes."""
    depth = 0
    for m in _BRACKET_TOKENS.finditer(text, start):
        c = m.group()
        if c[0] == '"':
            if len(c) == 1:
                raise ValueError(f"unbalanced quotes in {text[:60]!r}")
        elif c in "({[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.start()
    raise ValueError(f"unbalanced brackets in {text[:60]!r}")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or quotes."""
    if _BRACKETS.search(text) is None:
        # Nothing nests (names, numbers): every comma splits.
        flat = [part.strip() for part in text.split(",")]
        if not flat[-1]:
            flat.pop()
        return flat
    parts: list[str] = []
    depth = 0
    start = 0
    for m in _SPLIT_TOKENS.finditer(text):
        c = m.group()
        if c[0] == '"':
            if len(c) == 1:
                break  # a string that is not closed runs to the end
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif depth == 0:
            i = m.start()
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _strip_comments(text: str) -> str:
    """``text`` without ``/*...*/`` comments (XLA's ``/*index=5*/`` markers), strings untouched."""
    if "/*" not in text:
        return text
    return _STRING_OR_COMMENT.sub(lambda m: m.group(1) or "", text)
