"""A line's ``XEvent`` messages decoded from their wire bytes as columns, all events at once.

The hot path of a device trace is millions of small events (``metadata_id``, ``offset_ps`` or
``num_occurrences``, ``duration_ps`` and a few ``stats``): one protobuf message object per event,
read field by field in Python, costs microseconds each. Here the events' bytes (one buffer, with the
size of each event: the protobuf parser frames them, :data:`~hlo_doctor.trace.xspace.XLINE_SPLIT`)
are decoded in lockstep with numpy: each pass reads the next field of every event that has one,
so the passes are as many as an event has fields, whatever the number of events.

Field for field it reads what the parsed messages give (``xplane.proto``): the last value of a field
wins, the ``data`` and ``value`` oneofs keep the member written last, unknown fields are skipped by
their wire type. Anything it does not read as the protobuf runtime would (a group, a known field
with another wire type, a varint longer than ten bytes, a field that reaches past its message, a
``str_value`` that is not UTF-8, a ``uint64`` device time above ``2**63``) raises :class:`Unread`,
and the caller parses those events with the protobuf runtime instead, which decides (or rejects
the file) as it always has.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["EventColumns", "OwnStats", "Unread", "check_framed", "decode_events", "framed", "packed", "stat_value_at",
           "varint_sizes"]

_U7 = np.uint64(0x7F)


class Unread(Exception):
    """The bytes hold something this decoder leaves to the protobuf runtime."""


Own = tuple[tuple[str, object], ...]
"""An event's own op stats, ``(name, value)`` in the order the event holds them."""


class OwnStats(Mapping[int, Own]):
    """Event index -> its own op stats (:data:`Own`), for the events that carry any.

    Where every stat read is an integer (a device's ``Steps`` and ``XLA Modules`` lines: ``group_id``,
    ``program_id``, ``run_id`` on every event) the compiled reader keeps them as rows, ``(event, stat
    id, value)`` in the events' order, and no dict is made unless one is asked for: :meth:`last` reads
    one stat of every event from the rows at once. Otherwise it is the dict the decoders build."""

    __slots__ = ("_coded", "_map", "_names", "_rows")

    def __init__(self, mapping: dict[int, Own] | None = None, rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                 names: Mapping[int, str] | None = None,
                 coded: tuple[np.ndarray, np.ndarray, list[Own]] | None = None) -> None:
        self._map = mapping if mapping is not None or rows is not None or coded is not None else {}
        self._rows = rows
        self._names = names or {}
        self._coded = coded
        """(events, codes, kinds): each event's stats as an index into the distinct ones (a GPU's
        kernels carry their op's name, module and program: a few dozen kinds over 10^5 events), so
        no tuple is made per event unless a dict of them is asked for."""

    @classmethod
    def joined(cls, parts: Sequence[Mapping[int, Own]]) -> OwnStats:
        """The parts of one line (their event indexes are the line's), in order."""
        if len(parts) == 1 and isinstance(parts[0], OwnStats):
            return parts[0]
        rowed = [p._rows for p in parts if isinstance(p, OwnStats) and p._rows is not None]
        if len(rowed) == len(parts) and rowed:
            names = {k: v for p in parts if isinstance(p, OwnStats) for k, v in p._names.items()}
            return cls(rows=tuple(np.concatenate([r[k] for r in rowed]) for k in range(3)),  # type: ignore[arg-type]
                       names=names)
        coded = [p._coded for p in parts if isinstance(p, OwnStats) and p._map is None and p._coded is not None]
        if len(coded) == len(parts) and coded:
            # The parts' kinds put in one list (each kind once), their codes mapped to it.
            index: dict[Own, int] = {}
            kinds: list[Own] = []
            codes: list[np.ndarray] = []
            for _, part_codes, part_kinds in coded:
                to = np.empty(len(part_kinds), np.int32)
                for j, kind in enumerate(part_kinds):
                    at = index.get(kind)
                    if at is None:
                        at = index[kind] = len(kinds)
                        kinds.append(kind)
                    to[j] = at
                codes.append(to[part_codes])
            return cls(coded=(np.concatenate([c[0] for c in coded]), np.concatenate(codes), kinds))
        merged: dict[int, Own] = {}
        for part in parts:
            merged.update(part)
        return cls(merged)

    def items(self) -> Iterator[tuple[int, Own]]:  # type: ignore[override]
        """(event, its stats), in the events' order; from the codes where no dict was made."""
        if self._map is None and self._coded is not None:
            events, codes, kinds = self._coded
            return zip(events.tolist(), [kinds[c] for c in codes.tolist()], strict=True)
        return iter(self._mapping().items())

    def _mapping(self) -> dict[int, Own]:
        if self._map is None and self._coded is not None:
            self._map = dict(self.items())
        if self._map is None:
            assert self._rows is not None
            events, sids, values = self._rows
            names = [self._names[s] for s in sids.tolist()]
            built: dict[int, list[tuple[str, object]]] = {}
            for event, name, value in zip(events.tolist(), names, values.tolist(), strict=True):
                items = built.get(event)
                if items is None:
                    built[event] = [(name, value)]
                else:
                    items.append((name, value))
            self._map = {i: tuple(items) for i, items in built.items()}
        return self._map

    def __getitem__(self, event: int) -> Own:
        return self._mapping()[event]

    def __iter__(self) -> Iterator[int]:
        if self._map is None and self._coded is not None:
            return iter(self._coded[0].tolist())
        return iter(self._mapping())

    def __len__(self) -> int:
        if self._map is None and self._coded is not None:
            return len(self._coded[0])
        return len(self._mapping())

    def last(self, name: str, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Of events ``0..n-1``: whether each holds the stat ``name`` and its value (the last one an
        event holds, as a dict of its stats keeps); None where the stats are not integer rows (read
        them through the mapping)."""
        if self._rows is None:
            return None
        events, sids, values = self._rows
        ids = [sid for sid, stat in self._names.items() if stat == name]
        pick = np.flatnonzero(np.isin(sids, np.asarray(ids, np.int64))) if ids else np.zeros(0, np.intp)
        has = np.zeros(n, bool)
        out = np.zeros(n, np.int64)
        if pick.size:
            ev = events[pick]
            # The last row of each event (rows are in the events' order, an event's stats in order).
            last = np.flatnonzero(np.append(ev[1:] != ev[:-1], True)) if bool((np.diff(ev) >= 0).all()) else \
                len(ev) - 1 - np.unique(ev[::-1], return_index=True)[1]
            has[ev[last]] = True
            out[ev[last]] = values[pick][last]
        return has, out


@dataclass(frozen=True, slots=True)
class EventColumns:
    """The events of one buffer: ``offset_ps`` is 0 where ``num_occurrences`` is set, as the parsed
    message reads; a device-clock stat (``off_id`` / ``dur_id``) replaces the offset or duration."""

    mids: np.ndarray
    offsets_ps: np.ndarray
    durations_ps: np.ndarray
    occurrences: np.ndarray
    """``num_occurrences``, 1 where it is 0 or unset."""
    own: Mapping[int, Own]
    """Event index (from ``base``) -> its stats named in ``op_ids``, in order, as ``stat_value`` reads
    them (a dict, or :class:`OwnStats`)."""


def _varints(buf: np.ndarray, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The base-128 varints at ``pos`` (each must end by ``end``): values as uint64 and the index
    after. Byte by byte over all of them at once (whole columns, no scattered writes)."""
    if bool((pos >= end).any()):
        raise Unread("a field reaches past its message")
    last = len(buf) - 1
    b = buf[pos]
    value = (b & 0x7F).astype(np.uint64)
    alive = b >= 0x80
    length = np.ones(pos.size, np.int64)
    k = 1
    while alive.any():
        if k > 9:
            raise Unread("a varint longer than ten bytes")
        nb = buf[np.minimum(pos + k, last)]
        value |= np.where(alive, nb & 0x7F, 0).astype(np.uint64) << np.uint64(7 * k)
        length += alive
        alive &= nb >= 0x80
        k += 1
    after = pos + length
    if bool((after > end).any()):
        raise Unread("a varint reaches past its message")
    return value, after


def _fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, known: dict[int, int]
            ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Every field of every message ``buf[starts[k]:ends[k]]``, pass by pass: per pass (message
    index, field number, value or payload start, field end). ``known`` maps a field number to the one
    wire type it may have."""
    expected = np.full(max(known) + 2, -1, np.int64)  # field number -> its wire type; -1: any
    for known_number, known_wire in known.items():
        expected[known_number] = known_wire
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    pos = starts.astype(np.int64, copy=True)
    live = np.flatnonzero(pos < ends)
    while live.size:
        p, e = pos[live], ends[live]
        first = buf[p]
        if bool((first >= 0x80).any()):  # a field number above 15: a longer tag
            tag, p = _varints(buf, p, e)
        else:
            tag, p = first.astype(np.uint64), p + 1
        number = (tag >> np.uint64(3)).astype(np.int64)
        wire = (tag & np.uint64(7)).astype(np.int64)
        want = expected[np.minimum(number, len(expected) - 1)]
        if bool(((number == 0) | ((want >= 0) & (want != wire)) | (wire == 3) | (wire == 4) | (wire > 5)).any()):
            raise Unread("field number 0, a group, or a known field of another wire type")
        if bool((wire == 0).all()):
            value, stop = _varints(buf, p, e)
        else:
            value = np.zeros(live.size, np.uint64)
            stop = np.zeros(live.size, np.int64)
            v = np.flatnonzero(wire == 0)
            if v.size:
                value[v], stop[v] = _varints(buf, p[v], e[v])
            d = np.flatnonzero(wire == 2)
            if d.size:
                length, at = _varints(buf, p[d], e[d])
                if bool((length > np.uint64(1 << 40)).any()):
                    raise Unread("a field longer than its message")
                value[d] = at.astype(np.uint64)
                stop[d] = at + length.astype(np.int64)
            for w, width in ((1, 8), (5, 4)):
                f = np.flatnonzero(wire == w)
                if f.size:
                    value[f] = p[f].astype(np.uint64)
                    stop[f] = p[f] + width
        if bool((stop > e).any()):
            raise Unread("a field reaches past its message")
        out.append((live, number, value, stop))
        pos[live] = stop
        live = live[stop < e]
    return out


_EVENT_WIRES = {1: 0, 2: 0, 3: 0, 4: 2, 5: 0}
_STAT_WIRES = {1: 0, 2: 1, 3: 0, 4: 0, 5: 2, 6: 2, 7: 0}


def packed(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of messages of ``sizes`` bytes laid end to end (``b"".join`` of them)."""
    ends = np.cumsum(sizes, dtype=np.int64)
    return ends - sizes.astype(np.int64), ends


def framed(first: int, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the payloads of a run of length-delimited fields (one-byte tag, a varint
    length, the payload) whose first tag is at ``first``: a line's events as the file holds them."""
    heads = 1 + varint_sizes(sizes)
    ends = first + np.cumsum(heads + sizes, dtype=np.int64)
    return ends - sizes.astype(np.int64), ends


def check_framed(data: bytes | memoryview, starts: np.ndarray, ends: np.ndarray, tag: int) -> None:
    """:class:`Unread` unless each payload ``data[starts[k]:ends[k]]`` follows the one-byte ``tag``
    and a varint of its length, back to back (what :func:`framed` assumed)."""
    if not len(starts):
        return
    buf = np.frombuffer(data, np.uint8)
    sizes = ends - starts
    heads = starts - 1 - varint_sizes(sizes.astype(np.uint64))
    if int(heads[0]) < 0 or int(ends[-1]) > len(buf) or bool((heads[1:] != ends[:-1]).any()):
        raise Unread("the events are not one run of fields")
    if bool((buf[heads] != tag).any()):
        raise Unread("a field between the events")
    length, after = _varints(buf, heads + 1, starts + 1)
    if bool((after != starts).any()) or bool((length != sizes.astype(np.uint64)).any()):
        raise Unread("an event's length is not what the parser read")


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of the varint of each value."""
    sizes = np.ones(len(values), np.int64)
    for k in range(1, 10):
        sizes += values >= (1 << (7 * k))
    return sizes


def decode_events(data: bytes | memoryview, starts: np.ndarray, ends: np.ndarray, off_id: int, dur_id: int,
                  op_ids: dict[int, str], snames: dict[int, str], base: int = 0) -> EventColumns:
    """The events whose bytes are ``data[starts[k]:ends[k]]`` (:func:`packed`, :func:`framed`)."""
    n = len(starts)
    buf = np.frombuffer(data, np.uint8)
    if n and (int(ends[-1]) > len(buf) or int(starts[0]) < 0):
        raise Unread("the events reach past the bytes")
    mids = np.zeros(n, np.uint64)
    offs = np.zeros(n, np.uint64)
    durs = np.zeros(n, np.uint64)
    occs = np.zeros(n, np.uint64)
    stat_owner: list[np.ndarray] = []
    stat_start: list[np.ndarray] = []
    stat_end: list[np.ndarray] = []
    for live, number, value, stop in _fields(buf, starts, ends, _EVENT_WIRES):
        for field_no, column in ((1, mids), (3, durs)):
            k = number == field_no
            column[live[k]] = value[k]
        k = number == 2  # the oneof's member written last wins; the other reads 0
        offs[live[k]], occs[live[k]] = value[k], 0
        k = number == 5
        occs[live[k]], offs[live[k]] = value[k], 0
        k = number == 4
        if k.any():
            stat_owner.append(live[k])
            stat_start.append(value[k].astype(np.int64))
            stat_end.append(stop[k])
    own: dict[int, tuple[tuple[str, object], ...]] = {}
    if stat_owner:
        owner = np.concatenate(stat_owner)
        s_start, s_end = np.concatenate(stat_start), np.concatenate(stat_end)
        order = np.argsort(s_start, kind="stable")  # file order: an event's later stat wins
        owner, s_start, s_end = owner[order], s_start[order], s_end[order]
        own = _stats(buf, owner, s_start, s_end, off_id, dur_id, op_ids, snames, offs, durs, base)
    signed = np.int64
    return EventColumns(mids.view(signed), offs.view(signed), durs.view(signed),
                        np.where(occs == 0, np.uint64(1), occs).view(signed), own)


def _stats(buf: np.ndarray, owner: np.ndarray, starts: np.ndarray, ends: np.ndarray, off_id: int, dur_id: int,
           op_ids: dict[int, str], snames: dict[int, str], offs: np.ndarray, durs: np.ndarray,
           base: int) -> dict[int, tuple[tuple[str, object], ...]]:
    m = len(owner)
    sid = np.zeros(m, np.uint64)
    kind = np.zeros(m, np.int64)  # the value oneof's member (field number), 0: none
    value = np.zeros(m, np.uint64)  # a varint, or the payload's start (double, str, bytes)
    stop = np.zeros(m, np.int64)
    for live, number, v, s in _fields(buf, starts, ends, _STAT_WIRES):
        k = number == 1
        sid[live[k]] = v[k]
        k = (number >= 2) & (number <= 7)
        kind[live[k]], value[live[k]], stop[live[k]] = number[k], v[k], s[k]
    sid_signed = sid.view(np.int64)
    for target_id, column in ((off_id, offs), (dur_id, durs)):
        if target_id < 0:
            continue
        hit = np.flatnonzero(sid_signed == target_id)
        if not hit.size:
            continue
        # ``int64_value or uint64_value``: the member written, 0 for any other.
        k = kind[hit]
        if int(((k == 3) & (value[hit] >= np.uint64(1 << 63))).sum()):
            raise Unread("a uint64 device time above 2**63")
        column[owner[hit]] = np.where((k == 3) | (k == 4), value[hit], np.uint64(0))
    own: dict[int, list[tuple[str, object]]] = {}
    if op_ids:
        wanted = np.isin(sid_signed, np.fromiter(op_ids, np.int64, len(op_ids)))
        for i in np.flatnonzero(wanted).tolist():
            own.setdefault(base + int(owner[i]), []).append(
                (op_ids[int(sid_signed[i])], stat_value_at(buf, int(kind[i]), int(value[i]), int(stop[i]), snames)))
    return {i: tuple(items) for i, items in own.items()}


def stat_value_at(buf: np.ndarray, kind: int, value: int, stop: int, snames: dict[int, str]) -> object:
    """One stat's value as :func:`hlo_doctor.trace.xspace.stat_value` reads it: ``kind`` is the
    ``value`` oneof's member (its field number, 0: none), ``value`` a varint's value or where the
    payload starts in ``buf``, ``stop`` where the field ends."""
    if kind == 0:
        return None
    if kind == 2:
        return float(buf[value:value + 8].view("<f8")[0])
    if kind == 3:
        return value
    if kind == 4:
        return value - (1 << 64) if value >= 1 << 63 else value
    if kind == 7:
        return snames.get(value, "")
    raw = buf[value:stop].tobytes()
    if kind == 6:
        return raw.decode("utf-8", errors="replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Unread("a str_value that is not UTF-8") from None
