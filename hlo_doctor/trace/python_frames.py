"""The host thread that drives the devices, as the Python tracer and jax's dispatch record it.

With the Python tracer on (``python_tracer_level=1``: ``jax.profiler.start_trace``'s default, and
``hlo-doctor profile``'s), every Python call on a host thread is an event on the host plane
(``/host:CPU``) named ``$file.py:12 function`` (the file's base name and the line where the
function STARTS: the tracer records calls, not lines), ``$builtins isinstance`` for a C function.
jax's dispatch of a jitted function or of an eager op is a ``PjitFunction(<name>)`` span on the same
thread (every backend). Nested events on one line are nested calls.

:func:`dispatching_threads` keeps, per host, every thread that dispatches programs (a server
thread and a detokenizer, two engines in one process), the one with the most ``PjitFunction`` spans
first (the **driver** thread); without any dispatch, the thread with the most Python frames
(:mod:`hlo_doctor.trace.host_threads` reads them per host from xplane and trace JSON files). Python threads that dispatch nothing (a progress bar's refresh thread, a thread
that only starts and joins others) are left out: the devices never wait for them.
Besides Python frames it keeps the dispatch spans, compile events and the PJRT client's execution
of a program (``EXECUTE_MARKER`` in :mod:`hlo_doctor.trace.conventions`).
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hlo_doctor.trace.columns import unique_inverse
from hlo_doctor.trace.conventions import BACKEND_COMPILE_MARKERS, DISPATCH_PREFIX, EXECUTE_MARKER
from hlo_doctor.trace.cwire import COMPILED
from hlo_doctor.trace.wire import Unread
from hlo_doctor.trace.xspace import event_names

_COMPILE = re.compile("|".join(re.escape(m) for m in BACKEND_COMPILE_MARKERS))
XPLANE_SUFFIX = ".xplane.pb"
_NO_TIMES = np.zeros(0)
_NO_CODES = np.zeros(0, np.int32)


@dataclass(frozen=True, slots=True)
class PyFrame:
    """One Python-tracer frame name, split: ``runner.py``, 124, ``execute_decode``."""

    file: str
    """The file's base name as the tracer writes it (``runner.py``), or a C module (``builtins``)."""
    line: int
    """The line where the function starts; 0 for a C function."""
    function: str

    @property
    def is_python_file(self) -> bool:
        """True for a frame of a ``.py`` file (not a C function, not ``<string>``)."""
        return self.line > 0 and not self.file.startswith("<")

    def text(self) -> str:
        """``runner.py:124 execute_decode``."""
        return f"{self.file}:{self.line} {self.function}" if self.line else f"{self.file} {self.function}"


def parse_frame(name: str) -> PyFrame | None:
    """The frame an event name stands for (``$runner.py:124 execute_decode``); None for other events."""
    if not name.startswith("$"):
        return None
    head, _, function = name[1:].partition(" ")
    file, sep, line = head.rpartition(":")
    if sep and line.isdigit():
        return PyFrame(file, int(line), function.strip())
    return PyFrame(head, 0, function.strip())


@dataclass(frozen=True, slots=True)
class DriverThread:
    """The events of one host thread that say what the host was doing: Python frames, dispatch spans
    and compile events, as parallel columns sorted by start (longest first on a tie)."""

    host: str
    plane: str
    line: str
    """The line's name (``python3``, the thread's name); its id when it has none."""
    start_ns: np.ndarray
    end_ns: np.ndarray
    name_code: np.ndarray
    names: tuple[str, ...]
    dispatches: int
    """``PjitFunction`` spans on the thread (nested re-entries included)."""
    frames: int
    """Python-tracer frames of Python functions on the thread (C functions are not kept)."""
    line_id: int = 0
    """The line's id: the Python tracer names every Python thread's line ``python``."""

    def __len__(self) -> int:
        return len(self.start_ns)

    def without_events(self) -> DriverThread:
        """The thread's name, counts and vocabulary, its event columns let go (empty)."""
        return replace(self, start_ns=_NO_TIMES, end_ns=_NO_TIMES, name_code=_NO_CODES)


def is_host_event(name: str) -> bool:
    """True for an event a host thread's time is read from: a frame of a ``.py`` file, a dispatch span,
    the PJRT client's execution of a program, a compile event."""
    # C functions (``$builtins max``: most of a Python loop's events) never change what the host is
    # doing around them: they are left out.
    if name.startswith("$"):
        frame = parse_frame(name)
        return frame is not None and frame.is_python_file
    return name.startswith(DISPATCH_PREFIX) or EXECUTE_MARKER in name or bool(_COMPILE.search(name))


def host_of(path: Path) -> str:
    name = path.name
    return name[: -len(XPLANE_SUFFIX)] if name.endswith(XPLANE_SUFFIX) else path.stem


_EXACT = 1 << 53
"""Integers up to this size (either sign) are exact as float64."""


def exact_times(base_ps: int, offsets_ps: np.ndarray, durations_ps: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Starts ``(base_ps + offset) / 1000`` and ends ``start + duration / 1000`` (ns, float64) of a
    line's events, each the float that Python's exact integer division gives, computed by numpy
    where it gives the same: every ``base_ps + offset`` and duration exact as a float64 (a float
    division of exact operands is correctly rounded, as Python's of integers is). None where one is
    not (a hostile or an absolute clock in picoseconds): the caller works those out in Python."""
    if not len(offsets_ps):
        return np.zeros(0), np.zeros(0)
    lo, hi = int(offsets_ps.min()), int(offsets_ps.max())
    if not (abs(base_ps) < _EXACT and -_EXACT <= lo + base_ps and hi + base_ps <= _EXACT and abs(lo) <= _EXACT
            and abs(hi) <= _EXACT and -_EXACT <= int(durations_ps.min()) and int(durations_ps.max()) <= _EXACT):
        return None
    starts = offsets_ps.astype(np.int64)  # (in range: no wrap)
    starts += np.int64(base_ps)
    start_ns = starts.astype(np.float64)
    del starts
    start_ns /= 1000.0
    end_ns = durations_ps.astype(np.float64)
    end_ns /= 1000.0
    end_ns += start_ns
    return start_ns, end_ns


def _columns(line: object, codes: dict[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Starts, ends (ns) and codes of the line's events whose metadata ``codes`` names, from the
    compiled reader's columns; None where the line is read message by message (:func:`_thread`).
    Each kept event's times are worked out from its picosecond integers as the loop does (exactly)."""
    columns = getattr(line, "event_columns", None)
    if not COMPILED or columns is None:
        return None
    base = line.timestamp_ns * 1000  # type: ignore[attr-defined]
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    kept: list[np.ndarray] = []
    try:
        for part in columns(-1, -1, {}, {}):  # a chunk of the line at a time: only its kept events stay
            uniq, which = unique_inverse(part.mids)
            code_of = np.fromiter((codes.get(m, -1) for m in uniq.tolist()), np.int32, len(uniq))[which]
            keep = np.flatnonzero(code_of >= 0)
            kept.append(code_of[keep])
            offsets, durations = part.offsets_ps[keep], part.durations_ps[keep]
            exact = exact_times(base, offsets, durations)
            if exact is None:
                # Integers past float64's exact range: a chunk's times worked out in Python's integers,
                # then held as floats at once (8 bytes an event, not a Python float's 32).
                chunk = [(base + off) / 1000 for off in offsets.tolist()]
                exact = (np.array(chunk, np.float64), np.array(
                    [start + dur / 1000 for start, dur in zip(chunk, durations.tolist(), strict=True)], np.float64))
                del chunk
            starts.append(exact[0])
            ends.append(exact[1])
    except Unread:
        return None
    return (np.concatenate(starts) if starts else np.zeros(0), np.concatenate(ends) if ends else np.zeros(0),
            np.concatenate(kept) if kept else np.zeros(0, np.int32))


def _thread(host: str, plane: object, line: object, names: dict[int, str],
            codes: dict[int, int]) -> DriverThread | None:
    got = _columns(line, codes)
    if got is not None:
        s, e, c = got
    else:
        starts, ends, which = array("d"), array("d"), array("i")
        base = line.timestamp_ns * 1000  # type: ignore[attr-defined]
        for ev in line.events:  # type: ignore[attr-defined]
            code = codes.get(ev.metadata_id)
            if code is None:
                continue
            start = (base + ev.offset_ps) / 1000
            starts.append(start)
            ends.append(start + ev.duration_ps / 1000)
            which.append(code)
        s, e = np.frombuffer(starts, np.float64), np.frombuffer(ends, np.float64)
        c = np.frombuffer(which, np.int32)
    if not len(s):
        return None
    if len(s) > 1 and not bool(np.all(s[1:] > s[:-1])):
        order = np.lexsort((-e, s))
        s, e, c = s[order], e[order], c[order]
        del order
    vocabulary = tuple(names[mid] for mid in sorted(codes, key=codes.__getitem__))
    dispatch_codes = np.fromiter((n.startswith(DISPATCH_PREFIX) for n in vocabulary), bool, len(vocabulary))
    frame_codes = np.fromiter((n.startswith("$") for n in vocabulary), bool, len(vocabulary))
    label = str(line.name or line.display_name or line.id)  # type: ignore[attr-defined]
    return DriverThread(host, str(plane.name), label, s, e, c, vocabulary,  # type: ignore[attr-defined]
                        int(dispatch_codes[c].sum()), int(frame_codes[c].sum()), int(line.id))  # type: ignore[attr-defined]


def threads_of_plane(host: str, plane: object) -> list[DriverThread]:
    """Every thread of one host plane with Python frames, dispatch spans or compile events, in the
    plane's line order."""
    names = event_names(plane)
    wanted = [mid for mid, name in names.items() if is_host_event(name)]
    if not wanted:
        return []
    codes = {mid: i for i, mid in enumerate(wanted)}
    return [t for line in plane.lines  # type: ignore[attr-defined]
            if (t := _thread(host, plane, line, names, codes)) is not None]


def _rank(thread: DriverThread) -> tuple[int, int]:
    return thread.dispatches, thread.frames


def dispatching_threads(threads: list[DriverThread]) -> list[DriverThread]:
    """The threads that dispatch programs, most dispatches first (the first found first on a tie);
    without any, the one with the most Python frames alone (see the module's docstring)."""
    ranked = sorted(threads, key=lambda t: (-t.dispatches, -t.frames))  # stable: the first found first
    if not ranked:
        return []
    return [t for t in ranked if t.dispatches > 0] or ranked[:1]


def driver_thread_of_plane(host: str, plane: object) -> DriverThread | None:
    """The thread of one host plane that dispatches the most programs (see the module's docstring)."""
    found = dispatching_threads(threads_of_plane(host, plane))
    return found[0] if found else None
