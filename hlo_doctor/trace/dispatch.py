"""Host dispatch of each program, read from a trace's host events.

A program launched on its own costs the step more than its device time: the host enters jax's
dispatch (``PjitFunction(<name>)``, the C++ fast path every jitted or eager call goes through),
prepares arguments, launches, and the next program waits for it. The trace records that span on
the host plane (``/host:CPU``) on every backend.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace.model import HostDispatch
from hlo_doctor.trace.stream import XSpaceFile
from hlo_doctor.trace.wire import Unread
from hlo_doctor.trace.xspace import METADATA_PLANE

_DISPATCH = re.compile(r"^PjitFunction\((.+)\)$")


def read_host_dispatch(paths: list[Path]) -> tuple[HostDispatch, ...]:
    """Dispatch spans per program from the host planes of ``paths`` (xplane files).

    Nested events of the same name (jax re-enters the fast path on a cache miss) count once, by
    their outermost span. Only host planes are parsed (a device trace's planes are skipped). A file
    that cannot be read yields nothing: an estimate then counts device time only.
    """
    calls: dict[str, int] = {}
    total: dict[str, float] = {}
    for path in paths:
        one_calls: dict[str, int] = {}
        one_total: dict[str, float] = {}
        try:
            _add_spans(path, one_calls, one_total)
        except (InputError, OSError):
            continue
        for module, n in one_calls.items():
            calls[module] = calls.get(module, 0) + n
            total[module] = total.get(module, 0.0) + one_total[module]
    return tuple(HostDispatch(m, calls[m], total[m]) for m in sorted(calls))


def _add_spans(path: Path, calls: dict[str, int], total: dict[str, float]) -> None:
    """Count the outermost dispatch spans of one file's host planes into ``calls`` and ``total``."""
    with XSpaceFile(path, str(path)) as space:
        for ref in space.planes:
            if not ref.name.startswith("/host:") or ref.name == METADATA_PLANE:
                continue
            plane = space.plane(ref)
            names = {entry.key: m.group(1) for entry in plane.event_metadata
                     if (m := _DISPATCH.match(entry.value.name))}
            if not names:
                continue
            for line in plane.lines:
                spans = _spans(line, names)
                open_until: dict[str, int] = {}
                for start, end, name in spans:
                    if start < open_until.get(name, -1):
                        continue  # nested inside an outer span of the same program
                    open_until[name] = end
                    module = f"jit_{name}"
                    calls[module] = calls.get(module, 0) + 1
                    total[module] = total.get(module, 0.0) + (end - start) / 1e6


def _spans(line: object, names: dict[int, str]) -> list[tuple[int, int, str]]:
    """(start, end, program) of the line's dispatch spans (offsets in ps), sorted: from the line's
    columns, a chunk at a time, where they can be read so (a Python tracer's thread holds millions of
    events, a few of them dispatches), else from its parsed events."""
    found = _column_spans(line, names)
    if found is None:  # read by the protobuf runtime, whole
        found = [(e.offset_ps, e.offset_ps + e.duration_ps, names[e.metadata_id])
                 for e in line.events if e.metadata_id in names]  # type: ignore[attr-defined]
    return sorted(found)


def _column_spans(line: object, names: dict[int, str]) -> list[tuple[int, int, str]] | None:
    """The dispatch spans from the line's columns; None where it has none or they leave the line to
    the protobuf runtime (:class:`~hlo_doctor.trace.wire.Unread`)."""
    columns = getattr(line, "event_columns", None)
    if columns is None:
        return None
    ids = np.fromiter(names, np.int64, len(names))
    found: list[tuple[int, int, str]] = []
    try:
        for part in columns(-1, -1, {}, {}):
            keep = np.flatnonzero(np.isin(part.mids, ids))
            found.extend((off, off + dur, names[mid]) for off, dur, mid in zip(
                part.offsets_ps[keep].tolist(), part.durations_ps[keep].tolist(), part.mids[keep].tolist(), strict=True))
    except Unread:
        return None
    return found
