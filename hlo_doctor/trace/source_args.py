"""An op's source line from a trace's ``source`` / ``source_stack`` stats.

libtpu writes two stats on each ``XLA Ops`` event metadata, which xprof's ``trace_viewer`` export
(and jax's own trace JSON) copies into every op event's ``args``: ``source``, the op's line as the
HLO metadata names it (``model.py:123``; jax's innermost frame outside its own files, often a
framework's line such as flax's ``linen/linear.py``), and ``source_stack``, the op's Python stack
as ``file:line`` lines, **innermost first** (the first line is ``source``). A stack whose *last*
line is ``source`` is read outermost first. A frame may carry a column (``file.py:12:7``) or a
function (``file.py:12 forward``).

The line shown is the one the xplane reader shows for the same op from the HLO module's stack
frames (:func:`hlo_doctor.hlo.frames.source_frame`): the first frame outside the frameworks, else
the innermost.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hlo_doctor.hlo.frames import Frame, source_frame

__all__ = ["op_source", "parse_frame", "parse_stack", "source_line", "stack_files"]

_FRAME = re.compile(r"^\s*(?P<file>\S.*?):(?P<line>\d+)(?::\d+)?(?:\s+(?:in\s+)?(?P<function>\S+))?\s*$")


def parse_frame(text: str) -> Frame | None:
    """One ``file:line`` (column and function optional) as a :class:`Frame`; None when it is none."""
    m = _FRAME.match(text)
    if m is None:
        return None
    return Frame(m.group("file"), int(m.group("line")), m.group("function") or "")


def parse_stack(source: str | None, stack: str | None) -> tuple[Frame, ...]:
    """The op's frames, innermost first, from ``source_stack`` (its order told by ``source``); the
    ``source`` frame alone when there is no stack; empty when neither names a line."""
    frames = tuple(f for f in map(parse_frame, (stack or "").splitlines()) if f is not None)
    first = parse_frame(source) if source else None
    if not frames:
        return (first,) if first is not None else ()
    if first is not None and len(frames) > 1 and frames[-1][:2] == first[:2] and frames[0][:2] != first[:2]:
        frames = frames[::-1]  # written outermost first
    return frames


def op_source(source: str | None, stack: str | None) -> tuple[str, tuple[Frame, ...]]:
    """``file:line`` the table and findings show for an op with these stats (empty when they name
    none), and its stack innermost first."""
    frames = parse_stack(source, stack)
    frame = source_frame(frames)
    if frame is None or not frame.file:
        return "", frames
    return (f"{frame.file}:{frame.line}" if frame.line else frame.file), frames


def stack_files(pairs: Iterable[tuple[str | None, str | None]]) -> set[str]:
    """The files the frames of these ``(source, source_stack)`` pairs name."""
    return {f.file for source, stack in pairs for f in parse_stack(source, stack) if f.file}


def source_line(pair: tuple[str | None, str | None] | None) -> str:
    """:func:`op_source`'s line for a ``(source, source_stack)`` pair; empty for None."""
    return op_source(*pair)[0] if pair is not None else ""
