"""The host threads of a trace JSON, as :mod:`hlo_doctor.trace.python_frames` reads them from an xplane.

jax's ``perfetto_trace.json.gz`` and xprof's ``trace_viewer`` export keep the host plane's lines:
one thread each, with the Python tracer's frames (``$runner.py:124 execute_decode``) when the
tracer was on, jax's ``PjitFunction(<name>)`` dispatch spans, compile events and the PJRT client's
execution of a program. The reader (:mod:`.json_events`) keeps exactly those host events; each
thread's become a :class:`~hlo_doctor.trace.python_frames.DriverThread` with the times of the
file's clock (the clock of its op events), so the step breakdown has its host side from the JSON.
A file without them (a trace with only device events) has no host threads.
Which planes are devices and which lines xprof derived are told here too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hlo_doctor.trace.conventions import DISPATCH_PREFIX
from hlo_doctor.trace.json_events import EventFile, EventLine
from hlo_doctor.trace.model import HostDispatch
from hlo_doctor.trace.python_frames import DriverThread, dispatching_threads, is_host_event

# xprof's derived lines: thread ids from trace_utils.h's kThreadIdDerivedMin, and the GPU lines it
# derives per stream ("XLA Modules - from #14").
_DERIVED_TID = 0xDEADBEEF
_FROM_STREAM = re.compile(r" - from #\d+$")


def is_device_plane(plane: str) -> bool:
    """A TPU/GPU plane (``/device:TPU:0``), as the xplane reader tells them."""
    return plane.startswith("/device:") and not plane.startswith("/device:CUSTOM")


def is_derived_line(tid: object, name: str) -> bool:
    """A line xprof derived from others (not in the xplane the profiler wrote)."""
    return (isinstance(tid, int) and tid >= _DERIVED_TID) or bool(_FROM_STREAM.search(name))


# The dispatch spans and threads of the files read last, by (path, size, mtime): the table reads a
# trace JSON once; diagnose asks for its dispatch and the breakdown for its threads after (Trace has
# no field for them).
DISPATCH_OF: dict[tuple[tuple[str, int, int], ...], tuple[HostDispatch, ...]] = {}
THREADS_OF: dict[tuple[tuple[str, int, int], ...], dict[str, list[DriverThread]]] = {}


def thread_of_line(f: EventFile, host: str, plane: str, tid: object, tname: str,
                   line: EventLine) -> DriverThread | None:
    """One host line's frames, dispatches, compiles and executions as a thread; None without any."""
    names = line.names
    if not len(names):
        return None
    codes = np.unique(names)
    wanted = codes[np.fromiter((is_host_event(str(f.names.values[c])) for c in codes.tolist()), bool, len(codes))]
    keep = np.isin(names, wanted)
    if not keep.any():
        return None
    starts = line.ts[keep]
    ends = starts + line.dur[keep]
    used, code = np.unique(names[keep], return_inverse=True)
    vocabulary = tuple(str(f.names.values[c]) for c in used.tolist())
    order = np.lexsort((-ends, starts))
    code = code.astype(np.int32)
    dispatch = np.fromiter((n.startswith(DISPATCH_PREFIX) for n in vocabulary), bool, len(vocabulary))
    frame = np.fromiter((n.startswith("$") for n in vocabulary), bool, len(vocabulary))
    line_id = tid if isinstance(tid, int) else 0
    return DriverThread(host, plane, tname or str(tid), starts[order], ends[order], code[order], vocabulary,
                        int(dispatch[code].sum()), int(frame[code].sum()), line_id)


def pick(found: dict[str, list[DriverThread]]) -> dict[str, list[DriverThread]]:
    """host -> its dispatching threads, the driver first (as from an xplane)."""
    return {host: picked for host, threads in found.items() if (picked := dispatching_threads(threads))}


def cache_key(paths: Sequence[Path]) -> tuple[tuple[str, int, int], ...]:
    """The key :func:`remember` keeps files' results by: (path, size, modification time) of each."""
    return tuple((str(Path(p).resolve()), (st := Path(p).stat()).st_size, st.st_mtime_ns) for p in paths)


def remember(paths: Sequence[Path], dispatch: tuple[HostDispatch, ...],
             threads: dict[str, list[DriverThread]]) -> None:
    """Keep the dispatch spans and threads of the files just read (read back by
    :mod:`hlo_doctor.trace.host_threads`, by :func:`cache_key`)."""
    key = cache_key(paths)
    if len(THREADS_OF) > 4:
        THREADS_OF.clear()
        DISPATCH_OF.clear()
    DISPATCH_OF[key] = dispatch
    THREADS_OF[key] = threads
