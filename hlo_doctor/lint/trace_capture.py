"""One capture as the host-time estimates read it: each host's driver thread, its op intervals, its steps.

Read once per set of files (cached by their modification times): :mod:`.host_cost` and
:mod:`.runtime_gaps` ask for the same capture rule after rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from hlo_doctor.core.errors import InputError
from hlo_doctor.lint.context import Context
from hlo_doctor.trace import find_xplanes, read_trace
from hlo_doctor.trace.host_threads import read_driver_threads
from hlo_doctor.trace.model import Trace
from hlo_doctor.trace.python_frames import DriverThread

_TRACE_KINDS = ("run", "xplane")


@dataclass(frozen=True, slots=True, eq=False)
class TraceCapture:
    """What the host-time estimates read of one capture: each host's driver thread and its op intervals."""

    threads: dict[str, DriverThread]
    ops: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    """host -> (start_ns, end_ns, module name, op name) of the ops with a place in time."""
    backend: str


OpIntervals = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]

_PRIMED: dict[tuple[tuple[str, ...], tuple[float, ...]], tuple[OpIntervals, str]] = {}
"""The op intervals and backend of the capture the op-stats stage just read (:func:`prime`), by its
files and their mtimes."""


def prime(paths: list[Path], trace: Trace) -> None:
    """Keep the op intervals of ``trace`` (read from ``paths``), so that :func:`trace_capture` of the same
    files does not read them again (``load_context`` observes the op-stats stage's read). Only the
    latest capture is kept."""
    try:
        key = _key(paths)
    except OSError:
        return
    _PRIMED.clear()
    _PRIMED[key] = (_intervals(trace), trace.backend)


def _key(paths: list[Path]) -> tuple[tuple[str, ...], tuple[float, ...]]:
    files = [Path(p).resolve() for p in paths]
    return tuple(str(p) for p in files), tuple(p.stat().st_mtime for p in files)


@lru_cache(maxsize=4)
def _read(paths: tuple[str, ...], stamp: tuple[float, ...]) -> TraceCapture | None:
    """Driver threads and op intervals of one capture (``stamp``: the files' mtimes, for the cache)."""
    files = [Path(p) for p in paths]
    threads = read_driver_threads(files)
    if not threads:
        return None
    primed = _PRIMED.get((tuple(str(p.resolve()) for p in files), stamp))
    if primed is not None:
        return TraceCapture(threads, *primed)
    try:
        trace = read_trace(files)
    except InputError:
        return None
    return TraceCapture(threads, _intervals(trace), trace.backend)


def _intervals(trace: Trace) -> OpIntervals:
    """host -> (start_ns, end_ns, module name, op name) of the ops with a place in time."""
    ev = trace.ops
    timed = ev.occurrences <= 1  # an aggregated event has no place in time
    hosts = np.asarray(ev.host)[timed]
    starts = ev.start_ns[timed].astype(np.float64)
    ends = starts + ev.duration_ns[timed].astype(np.float64)
    modules = np.asarray(ev.module, dtype=object)[timed]
    names = np.asarray(ev.op, dtype=object)[timed]
    return {str(h): (starts[hosts == h], ends[hosts == h], modules[hosts == h], names[hosts == h])
            for h in set(hosts.tolist())}


def trace_capture(ctx: Context) -> TraceCapture | None:
    """The capture behind ``ctx`` (read once per file set); None for an input without an xplane or a
    driver thread."""
    if ctx.kind not in _TRACE_KINDS or not ctx.origin:
        return None
    try:
        paths = find_xplanes(Path(ctx.origin))
        stamp = tuple(p.stat().st_mtime for p in paths)
    except (InputError, OSError):
        return None
    return _read(tuple(str(p) for p in paths), stamp)


def step_spans_ns(ctx: Context, host: str) -> tuple[np.ndarray, np.ndarray]:
    """The step spans (ns) of ``host``'s first device, from the step breakdown; empty without one."""
    b = ctx.breakdown
    if b is None:
        return np.zeros(0), np.zeros(0)
    start_us, wall_us = b.host_step_spans_us(host)
    return start_us * 1e3, (start_us + wall_us) * 1e3
