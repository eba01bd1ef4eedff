"""An XSpace read from its file a plane and a line at a time (a host's ``.xplane.pb``).

Parsing a whole trace at once holds the file, a copy of it split into planes, and the parsed plane
(a parsed event takes five to eight times its wire size). Here the protobuf wire format is walked
from the file instead:

- the XSpace's fields: each plane is an (offset, length) in the file, named by its first fields;
- a plane's own fields: its lines stay on disk as (offset, length); the rest (event and stat
  metadata, plane stats) is parsed once, as :data:`~hlo_doctor.trace.xspace.XPLANE_HEAD`;
- a line's events are read when they are iterated, a few MiB of them parsed at a time.

So the peak while reading is one plane's metadata plus one chunk of parsed events, whatever the
size of the file. Lines and planes written out of the usual field order (lines after the metadata,
events split by other fields) are still read: such a line is parsed whole.
"""

from __future__ import annotations

import io
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from google.protobuf.message import DecodeError

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.regular import open_regular
from hlo_doctor.trace.columns import unique_values
from hlo_doctor.trace.cwire import COMPILED, line_columns, line_events
from hlo_doctor.trace.source import Source, varint
from hlo_doctor.trace.wire import (
    EventColumns,
    Unread,
    check_framed,
    decode_events,
    framed,
    packed,
    varint_sizes,
)
from hlo_doctor.trace.xspace import XLINE, XLINE_SPLIT, XPLANE_HEAD

CHUNK_BYTES = 4 << 20
"""Events parsed at a time (wire bytes): a parsed chunk takes about 30 MiB."""
_PLANES, _LINES, _EVENTS, _NAME = 1, 3, 4, 2
_EVENT_TAG = _EVENTS << 3 | 2

LINE_CHUNK_BYTES = 4 << 20
"""The compiled reader's reads of a line's events (:meth:`LineRef.event_arrays`), each into one
buffer its thread keeps (:meth:`~hlo_doctor.trace.source.Source.read_into`): no block is allocated, nor page faulted in,
per read (a fresh ``bytes`` of 4 MiB is a fresh mapping, 1,024 page faults, each read)."""


MAX_LINES = 1 << 16
"""The most lines one plane may hold (real ones: a line per thread on a host, a few per device)."""
MAX_PLANES = 1 << 16
"""The most planes one file may hold (real ones: one per device, a few for the host)."""


def _parse(cls: Any, data: bytes | memoryview, source: Source, what: str) -> Any:
    try:
        return cls.FromString(data)
    except (DecodeError, ValueError) as exc:
        raise source.corrupt(f"{what}: {exc}") from exc


class LineRef:
    """One ``XLine`` on disk: its head fields at hand, its events parsed when iterated."""

    __slots__ = ("_source", "_offset", "_length", "_head", "_events_at", "_tail")

    def __init__(self, source: Source, offset: int, length: int) -> None:
        self._source, self._offset, self._length = source, offset, length
        self._tail: Any = None
        end = offset + length
        pos, parts = offset, []
        # The fields before the events (id, name, timestamp_ns, as the profiler writes them).
        while pos < end:
            f = source.field_at(pos, end)
            if f.number == _EVENTS:
                break
            parts.append(source.piece(pos, f.end - pos))
            pos = f.end
        self._events_at = pos - offset
        self._head = _parse(XLINE, b"".join(parts), source, "line")

    @property
    def id(self) -> int:
        """The line's id."""
        return int(self._head.id)

    @property
    def name(self) -> str:
        """The line's name (``XLA Ops``, a thread's name)."""
        return str(self._head.name)

    @property
    def timestamp_ns(self) -> int:
        """Start of the line (ns); event offsets are relative to it."""
        return int(self._head.timestamp_ns)

    def _whole(self) -> Any:
        if self._tail is None:
            data = self._source.read_at(self._offset, self._length)
            self._tail = _parse(XLINE_SPLIT, data, self._source, f"line {self.name}")
            del self._tail.raw_events[:]
        return self._tail

    @property
    def display_name(self) -> str:
        """The line's display name (written after its events: read on first use)."""
        return str(self._whole().display_name if self._head.display_name == "" else self._head.display_name)

    @property
    def display_id(self) -> int:
        """The line's display id."""
        return int(self._whole().display_id if self._head.display_id == 0 else self._head.display_id)

    @property
    def duration_ps(self) -> int:
        """The line's duration (ps)."""
        return int(self._whole().duration_ps if self._head.duration_ps == 0 else self._head.duration_ps)

    @property
    def wire_bytes(self) -> int:
        """The line's size in the file (its events' bytes, mostly)."""
        return self._length

    @property
    def events(self) -> Iterator[Any]:
        """The line's ``XEvent`` messages in order; each iteration reads them again from disk."""
        # chain: one Python step per chunk, not per event (a line holds up to millions of events).
        return itertools.chain.from_iterable(self._event_chunks())

    def _event_chunks(self) -> Iterator[Any]:
        """The line's events as a few repeated fields, each of about :data:`CHUNK_BYTES`."""
        source, where = self._source, f"line {self.name}"
        if self._length <= CHUNK_BYTES:
            yield _parse(XLINE, source.read_at(self._offset, self._length), source, where).events
            return
        data = source.read_at(self._offset, self._length)
        split = _parse(XLINE_SPLIT, data, source, where)
        sizes = np.fromiter((len(e) for e in split.raw_events), np.int64, len(split.raw_events))
        del split
        bounds = self._chunks(data, sizes)
        if bounds is None:
            # Events interleaved with other fields: this line is parsed whole.
            yield _parse(XLINE, data, source, where).events
            return
        del data
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            yield _parse(XLINE, source.read_at(self._offset + a, b - a), source, where).events

    def event_arrays(self, off_id: int, dur_id: int, op_ids: dict[int, str],
                     snames: dict[int, str]) -> tuple[Any, ...] | None:
        """The line's events as the columns a device line is read into (:func:`~hlo_doctor.trace.cwire.line_events`:
        ids, starts and durations in ns, occurrences, op stats), decoded in one pass by the compiled
        reader; None where it is not built or leaves the line to :meth:`event_columns`."""
        if not COMPILED:
            return None
        return line_events(self._source.read_into, self._offset + self._events_at, self._offset + self._length,
                           off_id, dur_id, op_ids, snames, LINE_CHUNK_BYTES, self.timestamp_ns)

    def event_columns(self, off_id: int, dur_id: int, op_ids: dict[int, str],
                      snames: dict[int, str]) -> Iterator[EventColumns]:
        """The line's events as columns, a chunk of about :data:`CHUNK_BYTES` at a time, decoded from
        their wire bytes (:mod:`hlo_doctor.trace.wire`); :class:`~hlo_doctor.trace.wire.Unread` where
        the protobuf runtime must read them instead (nothing is yielded after it)."""
        source, where = self._source, f"line {self.name}"
        if COMPILED:  # the compiled reader walks the line's fields itself (trace/cwire.py)
            yield from line_columns(source.read_at, self._offset + self._events_at, self._offset + self._length,
                                    off_id, dur_id, op_ids, snames, CHUNK_BYTES)
            return
        if self._length <= CHUNK_BYTES:
            raw = _parse(XLINE_SPLIT, source.read_at(self._offset, self._length), source, where).raw_events
            sizes = np.fromiter(map(len, raw), np.int64, len(raw))
            starts, ends = packed(sizes)
            yield decode_events(b"".join(raw), starts, ends, off_id, dur_id, op_ids, snames)
            return
        data = source.read_at(self._offset, self._length)
        split = _parse(XLINE_SPLIT, data, source, where)
        sizes = np.fromiter(map(len, split.raw_events), np.int64, len(split.raw_events))
        del split
        bounds = self._chunks(data, sizes)
        del data
        if bounds is None:
            raise Unread("events interleaved with other fields")
        _, all_ends = framed(self._events_at, sizes)
        cut = np.searchsorted(all_ends, np.asarray(bounds[1:-1], np.int64), side="right")
        firsts = [0, *cut.tolist(), len(sizes)]
        for (a, b), (k0, k1) in zip(zip(bounds[:-1], bounds[1:], strict=True),
                                    zip(firsts[:-1], firsts[1:], strict=True), strict=True):
            chunk = source.read_at(self._offset + a, b - a)
            starts, ends = framed(0, sizes[k0:k1])
            check_framed(chunk, starts, ends, _EVENT_TAG)
            yield decode_events(chunk, starts, ends, off_id, dur_id, op_ids, snames, base=k0)

    def _chunks(self, data: bytes, sizes: np.ndarray) -> list[int] | None:
        """Offsets (in the line) that cut its events into chunks of about :data:`CHUNK_BYTES`; None
        when the events are not one run of fields (each cut is checked against the data)."""
        if not len(sizes):
            return [self._events_at, self._events_at]
        ends = self._events_at + np.cumsum(sizes + 1 + varint_sizes(sizes))
        starts = np.r_[self._events_at, ends[:-1]]
        picks = unique_values(np.searchsorted(ends, np.arange(self._events_at + CHUNK_BYTES, int(ends[-1]),
                                                          CHUNK_BYTES)))
        picked = [k for k in picks.tolist() if 0 < k < len(sizes)]
        cuts = [int(starts[k]) for k in picked]
        for k, at in zip(picked, cuts, strict=True):
            try:
                if data[at] != _EVENT_TAG or varint(data, at + 1)[0] != int(sizes[k]):
                    return None
            except (IndexError, ValueError):
                return None
        last = int(ends[-1])
        if last > len(data):
            return None
        try:
            # What follows the run (display id and name...) must hold no more events.
            if XLINE_SPLIT.FromString(data[last:]).raw_events:
                return None
        except (DecodeError, ValueError):
            return None
        return [self._events_at, *cuts, last]


class StreamedPlane:
    """One ``XPlane``: its metadata and stats parsed, its lines (:class:`LineRef`) still on disk.

    Read like a parsed XPlane: ``name``, ``id``, ``event_metadata`` and ``stat_metadata`` (repeated
    ``key``/``value`` entries), ``stats`` and ``lines``.
    """

    def __init__(self, head: Any, lines: list[LineRef]) -> None:
        self.id = int(head.id)
        self.name = str(head.name)
        self.event_metadata = head.event_metadata
        self.stat_metadata = head.stat_metadata
        self.stats = head.stats
        self.lines = lines


@dataclass(frozen=True, slots=True)
class PlaneRef:
    """Where one plane lies in the file, and its name."""

    name: str
    offset: int
    length: int


class XSpaceFile:
    """An XSpace on disk (or in memory), opened for reading plane by plane.

    Raises :class:`InputError` for a file that cannot be read, is empty, truncated or corrupt, or
    holds no planes (the same cases as :func:`hlo_doctor.trace.xspace.split_planes`).
    """

    def __init__(self, source: Path | bytes, origin: str = "") -> None:
        self.origin = origin or str(source)
        f: IO[bytes]
        if isinstance(source, (bytes, bytearray)):
            f, size = io.BytesIO(source), len(source)
        else:
            try:
                f = open_regular(source)  # a FIFO planted as an xplane would block forever
                size = os.fstat(f.fileno()).st_size
            except OSError as exc:
                raise InputError(f"{self.origin}: cannot read ({exc.strerror})",
                                 "check the path and permissions") from exc
        self._source = Source(f, size, self.origin)
        try:
            self.planes = self._planes()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> XSpaceFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file."""
        self._source.release()
        self._source.f.close()

    def _planes(self) -> list[PlaneRef]:
        src = self._source
        if not src.size:
            raise InputError(f"{self.origin}: empty file", "capture again; the profiler wrote nothing")
        out: list[PlaneRef] = []
        pos = 0
        while pos < src.size:
            f = src.field_at(pos, src.size)
            if f.number == _PLANES:
                if len(out) == MAX_PLANES:
                    raise InputError(f"{self.origin}: more than {MAX_PLANES:,} planes (a profiler writes one per "
                                     "device and host)", "capture again; the file was not written by a profiler")
                out.append(PlaneRef(self._plane_name(f.value, f.end), f.value, f.end - f.value))
            pos = f.end
        if not out:
            raise InputError(f"{self.origin}: the trace holds no planes", "capture again; the profiler recorded nothing")
        return out

    def _plane_name(self, start: int, end: int) -> str:
        src, pos = self._source, start
        while pos < end:
            f = src.field_at(pos, end)
            if f.number == _NAME:
                try:
                    return src.piece(f.value, f.end - f.value).decode()
                except UnicodeDecodeError:
                    raise src.corrupt(f"plane name at offset {pos} is not UTF-8") from None
            if f.number > _NAME:
                break
            pos = f.end
        return ""

    def plane(self, ref: PlaneRef) -> StreamedPlane:
        """The plane ``ref``: metadata parsed, lines located (their events stay on disk)."""
        src = self._source
        end = ref.offset + ref.length
        lines: list[LineRef] = []
        parts: list[tuple[int, int]] = []  # runs of the other fields, (start, stop)
        for number, start, value, stop in src.fields(ref.offset, end):
            if number == _LINES:
                if len(lines) == MAX_LINES:
                    raise InputError(f"{self.origin}: plane {ref.name!r} holds more than {MAX_LINES:,} lines (a profiler "
                                     "writes one per thread or kind of event)", "capture again; the file was not "
                                     "written by a profiler as it stands")
                lines.append(LineRef(src, value, stop - value))
            elif parts and parts[-1][1] == start:
                parts[-1] = (parts[-1][0], stop)
            else:
                parts.append((start, stop))
        head = _parse(XPLANE_HEAD, b"".join(src.piece(a, b - a) for a, b in parts), src, f"plane {ref.name}")
        return StreamedPlane(head, lines)
