"""A line's events decoded by the compiled reader, ``_xwire`` (``_xwire.c``), when the install built it.

The extension is optional (``setup.py``): an install without a C compiler goes on without it, and
the events are decoded by numpy (:mod:`hlo_doctor.trace.wire`) with the same results, slower;
:data:`COMPILED` says which one this install has (``hlo-doctor --version`` prints it).

The compiled reader walks a line's fields from its first event, a chunk of the file at a time, and
decodes each event (and its stats) straight from the wire bytes into columns, reading as the
protobuf runtime does (the last value of a field wins, the ``data`` and ``value`` oneofs keep the
member written last, unknown fields skipped by their wire type). Every varint, length and nested
message is bounded by the end of the message holding it; anything the runtime must decide (a group,
a known field of another wire type, a varint longer than ten bytes, a field past its message, a
``uint64`` device time above ``2**63``) is :class:`~hlo_doctor.trace.wire.Unread`, as in
:mod:`~hlo_doctor.trace.wire`. The line's other fields (display name, duration) are parsed by the
protobuf runtime, which rejects what it would reject in a parsed line.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from types import ModuleType

import numpy as np
from google.protobuf.message import DecodeError

from hlo_doctor.trace.arrays import searchsorted, unique_values
from hlo_doctor.trace.wire import EventColumns, OwnStats, Unread, stat_value_at
from hlo_doctor.trace.xspace import XLINE_SPLIT

__all__ = ["COMPILED", "NUMPY_READER_ENV", "SEGMENTS_COMPILED", "enclosing_runs", "enclosing_spans", "line_columns", "nested_parents", "nested_self_times", "under_flagged", "line_events", "segments", "walk_fields"]

NUMPY_READER_ENV = "HLO_DOCTOR_NUMPY_READER"
"""Set (to anything but empty): the numpy reader even where the compiled one is built (to compare them)."""

_xwire: ModuleType | None = None
if not os.environ.get(NUMPY_READER_ENV):
    try:
        import hlo_doctor.trace._xwire as _xwire  # type: ignore[import-not-found,no-redef]
    except ImportError:
        pass

COMPILED: bool = _xwire is not None
"""Whether this install has the compiled reader."""

_xsegments: ModuleType | None = None
if not os.environ.get(NUMPY_READER_ENV):
    try:
        import hlo_doctor.trace._xsegments as _xsegments  # type: ignore[import-not-found,no-redef]
    except ImportError:
        pass

SEGMENTS_COMPILED: bool = _xsegments is not None
"""Whether this install has the compiled walk of a host thread's events (:func:`segments`)."""

_U64 = (1 << 64) - 1


def line_columns(read_at: Callable[[int, int], bytes], start: int, end: int, off_id: int, dur_id: int,
                 op_ids: dict[int, str], snames: dict[int, str], chunk: int) -> Iterator[EventColumns]:
    """The events of the line whose fields from the first event lie at ``[start, end)`` of the file,
    about ``chunk`` bytes at a time; raises :class:`Unread` (possibly after some chunks) where the
    protobuf runtime must read the line instead."""
    assert _xwire is not None
    wanted = np.array(sorted(op_ids), np.int64).tobytes()
    others: list[bytes] = []
    pos, first, size = start, 0, chunk
    while pos < end:
        n = min(size, end - pos)
        data = read_at(pos, n)
        got = _xwire.decode_line(data, off_id, dur_id, wanted, pos + n == end, first)
        if isinstance(got, str):
            raise Unread(got)
        consumed, need, mids, offs, durs, occs, stats, other = got
        if not consumed:  # the next field does not fit in this chunk: read it whole
            size = max(need, 2 * n)
            continue
        size = chunk
        bounds = np.frombuffer(other, np.int64).tolist()
        others.extend(data[a:b] for a, b in zip(bounds[::2], bounds[1::2], strict=True))
        occurrences = np.frombuffer(occs, np.int64)
        yield EventColumns(np.frombuffer(mids, np.int64), np.frombuffer(offs, np.int64),
                           np.frombuffer(durs, np.int64), np.where(occurrences == 0, 1, occurrences),
                           _own(data, np.frombuffer(stats, np.int64), op_ids, snames))
        first += len(occurrences)
        pos += consumed
    if others:
        try:
            XLINE_SPLIT.FromString(b"".join(others))
        except (DecodeError, ValueError):
            raise Unread("the line's other fields are not readable") from None


_INT64 = (-(1 << 63), (1 << 63) - 1)


_buffers = threading.local()
_KEEP_BUFFER_BYTES = 8 << 20
"""The largest read buffer a thread keeps; a read larger (one event of more, in a hostile file) gets
a buffer of its own, dropped after it."""


def _buffer(n: int) -> bytearray:
    """This thread's buffer for a line's reads, of ``n`` bytes at least (kept for the next line:
    no block allocated, nor pages faulted in, per read)."""
    if n > _KEEP_BUFFER_BYTES:
        return bytearray(n)
    buf: bytearray | None = getattr(_buffers, "buf", None)
    if buf is None or len(buf) < n:
        buf = _buffers.buf = bytearray(n)
    return buf


def line_events(read_into: Callable[[int, int, bytearray], memoryview], start: int, end: int, off_id: int, dur_id: int,
                op_ids: dict[int, str], snames: dict[int, str], chunk: int,
                timestamp_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, OwnStats] | None:
    """:func:`line_columns` of a whole line, joined as the reader uses them, in one pass written into
    the line's arrays: metadata ids (int32), starts in ns (``offset / 1000 + timestamp_ns``),
    durations in ns (float64), occurrences (int32, an unset count 1) and the op stats. None where an
    id or a count does not fit int32 (a hostile file: :func:`line_columns` reads it); raises
    :class:`Unread` as it does."""
    assert _xwire is not None
    if not _INT64[0] <= timestamp_ns <= _INT64[1]:
        return None
    wanted = np.array(sorted(op_ids), np.int64).tobytes()
    # A first guess of the line's events (30 bytes an event, the size of a device op event): arrays
    # grow by half when it is short; pages never written are never resident.
    cap = max((end - start) // 30, 1024)
    mids, starts = np.empty(cap, np.int32), np.empty(cap, np.float64)
    durations, occurrences = np.empty(cap, np.float64), np.empty(cap, np.int32)
    owns: list[OwnStats] = []
    others: list[bytes] = []
    pos, at, size = start, 0, chunk
    while pos < end:
        n = min(size, end - pos)
        data = read_into(pos, n, _buffer(n))
        got = _xwire.decode_into(data, off_id, dur_id, wanted, pos + n == end, timestamp_ns,
                                 mids, starts, durations, occurrences, at)
        if isinstance(got, str):
            raise Unread(got)
        consumed, need, written, full, wide, stats, other = got
        if wide:
            return None
        if not consumed and not full:  # the next field does not fit in this chunk: read it whole
            size = max(need, 2 * n)
            continue
        size = chunk
        bounds = np.frombuffer(other, np.int64).tolist()
        others.extend(bytes(data[a:b]) for a, b in zip(bounds[::2], bounds[1::2], strict=True))  # (copied: the buffer is reused)
        if len(stats):
            owns.append(_own(data, np.frombuffer(stats, np.int64), op_ids, snames))
        at += written
        pos += consumed
        if full:
            cap += cap // 2
            mids, starts, durations, occurrences = (_grown(a, at, cap) for a in (mids, starts, durations, occurrences))
    if others:
        try:
            XLINE_SPLIT.FromString(b"".join(others))
        except (DecodeError, ValueError):
            raise Unread("the line's other fields are not readable") from None
    return mids[:at], starts[:at], durations[:at], occurrences[:at], OwnStats.joined(owns)


def _grown(values: np.ndarray, used: int, cap: int) -> np.ndarray:
    """``values[:used]`` in an array of ``cap`` entries (the rest not written, so not resident)."""
    out = np.empty(cap, values.dtype)
    out[:used] = values[:used]
    return out


def walk_fields(data: bytes, base: int, end: int) -> tuple[np.ndarray, int]:
    """The fields of a message from ``data`` (at file offset ``base``; the message ends at ``end``)
    as rows (number, start, value, stop) of file offsets, and the offset the walk reached: it stops
    after a field whose payload runs past ``data`` and before one it leaves to the caller's reader
    (not well formed, past its message, or its head cut by the end of ``data``)."""
    assert _xwire is not None
    rows, stopped = _xwire.walk_fields(data, base, end)
    return np.frombuffer(rows, np.int64).reshape(-1, 4), stopped


def segments(starts: np.ndarray, ends: np.ndarray, names: np.ndarray, untraced: int,
             label_of: Callable[[int, int], int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A thread's nested events (sorted by start, longest first) as labelled segments that do not
    overlap: :func:`hlo_doctor.opstats.host_time.host_segments`'s walk, compiled. ``label_of(parent,
    name)`` is the code of an event's label from its parent's (-1: none) and its name's codes.
    Returns the starts, ends (float64) and labels (int32); the segments tile the time they cover, so
    the starts and ends are two views of one array of bounds."""
    assert _xsegments is not None
    # (The arrays are read in place through the buffer protocol: no copy of a thread's millions of events.)
    b, k = _xsegments.segments(np.ascontiguousarray(starts, np.float64), np.ascontiguousarray(ends, np.float64),
                               np.ascontiguousarray(names, np.int32), untraced, label_of)
    bounds = np.frombuffer(b, np.float64)
    return bounds[:-1], bounds[1:], np.frombuffer(k, np.int32)


def enclosing_runs(span_starts: np.ndarray, span_ends: np.ndarray, starts: np.ndarray) -> np.ndarray | None:
    """For each of ``starts``, the index of the last span (``span_starts`` sorted) starting at or before
    it, where that span ends at or after it, else -1 (int64), in one compiled walk; None where the
    compiled walk is not built or a value is NaN (the caller then does it with numpy)."""
    if _xsegments is None:
        return None
    out = np.empty(len(starts), np.int64)
    ok = _xsegments.enclosing(np.ascontiguousarray(starts, np.float64), np.ascontiguousarray(span_starts, np.float64),
                              np.ascontiguousarray(span_ends, np.float64), out)
    return out if ok else None


def enclosing_spans(span_starts: np.ndarray, span_ends: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """:func:`enclosing_runs`, or numpy's ``searchsorted`` where that leaves them (not built, a NaN):
    each start's enclosing span, else -1 (int64). Made in one array: a line's millions of events."""
    if not len(span_starts):
        return np.full(len(starts), -1, np.int64)
    run = enclosing_runs(span_starts, span_ends, starts)
    if run is not None:
        return run
    run = searchsorted(span_starts, starts, side="right")
    run -= 1
    inside = run >= 0
    inside &= span_ends[np.maximum(run, 0)] >= starts
    np.logical_not(inside, out=inside)
    run[inside] = -1
    return run


def nested_parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """Each event's enclosing event (int64; -1 at the top) of one thread's float64 events sorted by
    start, in one compiled walk; None where it is not built (the caller walks in Python)."""
    if _xsegments is None or starts.dtype != np.float64 or ends.dtype != np.float64:
        return None
    out = np.empty(len(starts), np.int64)
    _xsegments.parents(np.ascontiguousarray(starts), np.ascontiguousarray(ends), out)
    return out


def under_flagged(parent: np.ndarray, flag: np.ndarray) -> np.ndarray | None:
    """Whether an ancestor of each event (``parent``: int64, each event's enclosing one) is flagged,
    in one compiled walk; None where it is not built."""
    if _xsegments is None or parent.dtype != np.int64:
        return None
    out = np.zeros(len(parent), np.uint8)
    _xsegments.inside(np.ascontiguousarray(parent), np.ascontiguousarray(flag, np.bool_).view(np.uint8), out)
    return out.view(bool)


def nested_self_times(starts: np.ndarray, durations: np.ndarray) -> np.ndarray | None:
    """Each event's duration less its children's (one line's float64 events, sorted by start, longest
    first), in one compiled walk; None where it is not built (the caller then walks in Python)."""
    if _xsegments is None or starts.dtype != np.float64 or durations.dtype != np.float64:
        return None
    out = np.array(durations, np.float64, copy=True, order="C")
    _xsegments.self_times(np.ascontiguousarray(starts), np.ascontiguousarray(durations), out)
    return out


def _own(data: bytes | memoryview, rows: np.ndarray, op_ids: dict[int, str], snames: dict[int, str]) -> OwnStats:
    """Event index -> its stats named in ``op_ids``, in order, from the rows (event, stat id, kind,
    value or payload start, end) the compiled reader wrote."""
    if not rows.size:
        return OwnStats()
    buf = np.frombuffer(data, np.uint8)
    table = rows.reshape(-1, 5)
    kinds = table[:, 2]
    if bool(((kinds == 4) | ((kinds == 3) & (table[:, 3] >= 0))).all()):
        # Integers only (step and module lines: group_id, program_id, run_id): kept as rows, their
        # values as they are; a dict only if one is asked for.
        return OwnStats(rows=(table[:, 0].copy(), table[:, 1].copy(), table[:, 3].copy()),
                        names={sid: op_ids[sid] for sid in unique_values(table[:, 1]).tolist()})
    events = table[:, 0]
    if len(events) > 1 and bool((events[1:] >= events[:-1]).all()):
        return _coded_own(buf, table, op_ids, snames)
    sids, inverse = np.unique(table[:, 1], return_inverse=True)
    names = np.asarray([op_ids[sid] for sid in sids.tolist()] + [""], object)[inverse.reshape(-1)].tolist()
    values = _values(buf, table, snames)
    pairs = list(zip(names, values, strict=True))
    own: dict[int, list[tuple[str, object]]] = {}
    for event, pair in zip(events.tolist(), pairs, strict=True):
        items = own.get(event)
        if items is None:
            own[event] = [pair]
        else:
            items.append(pair)
    return OwnStats({i: tuple(items) for i, items in own.items()})


def _distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of these int64 columns: the index of each one's first row, and each row's
    code (int64, in the order of the distinct rows); one integer a row where the columns' distinct
    values allow (a sort of integers, not of rows), else numpy's unique rows."""
    key = np.zeros(len(columns[0]), np.int64)
    size = 1
    for column in columns:
        uniq, code = np.unique(column, return_inverse=True)
        size *= max(len(uniq), 1)
        if size >= 1 << 62:
            _, first, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_index=True, return_inverse=True)
            return first, inverse.reshape(-1)
        key *= len(uniq)
        key += code.reshape(-1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


_PAYLOAD_KINDS = (2, 5, 6)
"""A stat's value kinds read from a payload (double, str, bytes): the others are their varint."""


def _coded_own(buf: np.ndarray, table: np.ndarray, op_ids: dict[int, str], snames: dict[int, str]) -> OwnStats:
    """:func:`_own` of rows in the events' order, each event's stats coded by their distinct kinds:
    each distinct row (stat id, kind, value; a payload's place too) read once, each distinct run of
    an event's rows made a tuple once. A GPU line's 10^5 kernels carry a few dozen."""
    stops = table[:, 4].copy()
    stops[~np.isin(table[:, 2], _PAYLOAD_KINDS)] = 0  # a varint's value does not depend on where its field ends
    first, row_code = _distinct_rows([table[:, 1], table[:, 2], table[:, 3], stops])
    del stops
    rows = table[first]
    values = _values(buf, rows, snames)
    pairs = [(op_ids[sid], value) for sid, value in zip(rows[:, 1].tolist(), values, strict=True)]
    events = table[:, 0]
    starts = np.flatnonzero(np.append(True, events[1:] != events[:-1]))
    lengths = np.diff(np.append(starts, len(events)))
    width = int(lengths[0])
    if bool((lengths == width).all()) and len(pairs) ** width < (1 << 62):  # the usual case
        # Every event holds as many stats: its run of row codes as one integer.
        run_key = np.zeros(len(starts), np.int64)
        for j in range(width):
            run_key *= len(pairs)
            run_key += row_code[starts + j]
        runs, codes = np.unique(run_key, return_inverse=True)
        kinds = [tuple(pairs[(r // len(pairs) ** (width - 1 - j)) % len(pairs)] for j in range(width))
                 for r in runs.tolist()]
        return OwnStats(coded=(events[starts].copy(), codes.reshape(-1).astype(np.int32), kinds))
    index: dict[tuple[int, ...], int] = {}
    event_codes = np.empty(len(starts), np.int32)
    flat = row_code.tolist()
    for k, (a, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
        event_codes[k] = index.setdefault(tuple(flat[a:a + n]), len(index))
    kinds = [tuple(pairs[r] for r in run) for run in index]
    return OwnStats(coded=(events[starts].copy(), event_codes, kinds))


def _values(buf: np.ndarray, table: np.ndarray, snames: dict[int, str]) -> list[object]:
    """Each row's value as :func:`~hlo_doctor.trace.wire.stat_value_at` reads it: integers and
    references (what an op event's stats mostly are) a kind at a time, the rest row by row."""
    kinds, raw = table[:, 2], table[:, 3]
    out = np.full(len(table), None, object)
    unsigned = raw.astype(np.uint64)
    for kind in unique_values(kinds).tolist():
        at = np.flatnonzero(kinds == kind)
        if kind == 0:
            continue
        if kind == 3:
            out[at] = unsigned[at].tolist()  # uint64_value
        elif kind == 4:
            out[at] = raw[at].tolist()  # int64_value: the signed value as written
        elif kind == 7:
            refs, which = np.unique(unsigned[at], return_inverse=True)
            out[at] = np.asarray([snames.get(r, "") for r in refs.tolist()] + [""], object)[which.reshape(-1)]
        else:
            out[at] = [stat_value_at(buf, kind, value & _U64, stop, snames)
                       for value, stop in table[at][:, 3:5].tolist()]
    return out.tolist()
