"""A device line's events as columns: the hot loop of a device trace (millions of events).

A line still on disk is decoded from its wire bytes (the compiled reader, :mod:`hlo_doctor.trace.cwire`,
or numpy, :mod:`hlo_doctor.trace.wire`); a line the decoder leaves to the protobuf runtime, or a parsed
line, is read message by message. Both give the same :class:`Line`.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from hlo_doctor.trace.columns import narrowest
from hlo_doctor.trace.cwire import COMPILED
from hlo_doctor.trace.wire import OwnStats, Unread
from hlo_doctor.trace.xspace import stat_value

WIRE_MIN_BYTES = 0 if COMPILED else 256 << 10
"""Lines from this size are decoded from their wire bytes: below it numpy's per-call cost is more
than the messages' per-event cost (measured on the bundled XLA:CPU and H200 captures); the compiled
reader (:mod:`hlo_doctor.trace.cwire`) reads every line."""


@dataclass(frozen=True, slots=True)
class Line:
    """One line's events as columns (times in ns on the device clock where the trace gives it)."""

    mids: np.ndarray
    start_ns: np.ndarray
    duration_ns: np.ndarray
    occurrences: np.ndarray
    own: OwnStats
    """Event index -> the event's own op stats, for the events that carry any."""


def scan(line: object, off_id: int, dur_id: int, op_ids: dict[int, str], snames: dict[int, str],
         wire_only: bool = False) -> Line:
    """The events of one line as columns; the hot loop of a device trace (millions of events).

    A line still on disk is decoded from its wire bytes (:mod:`hlo_doctor.trace.wire`); one the
    decoder leaves to the protobuf runtime, or a parsed line, is read message by message
    (``wire_only``: :class:`Unread` is raised instead)."""
    columns = getattr(line, "event_columns", None)
    if wire_only and (columns is None or getattr(line, "wire_bytes", 0) < WIRE_MIN_BYTES):
        raise Unread("not on disk")
    if columns is not None and getattr(line, "wire_bytes", 0) >= WIRE_MIN_BYTES:
        try:
            whole = getattr(line, "event_arrays", None)
            arrays = whole(off_id, dur_id, op_ids, snames) if whole is not None else None
            if arrays is not None:  # the compiled reader's one pass
                return Line(*arrays)
            parts = list(columns(off_id, dur_id, op_ids, snames))
        except Unread:
            if wire_only:
                raise
        else:
            ts = line.timestamp_ns  # type: ignore[attr-defined]
            own = OwnStats.joined([part.own for part in parts])

            chunks = {name: [getattr(part, name) for part in parts]
                      for name in ("mids", "offsets_ps", "durations_ps", "occurrences")}
            del parts

            def joined(name: str) -> np.ndarray:
                # Each column of the chunks joined, then the chunks' column dropped (the peak is the
                # line's columns plus one); the times are made floats in place.
                arrays = chunks.pop(name)
                if len(arrays) == 1:
                    return arrays[0]
                return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

            start_ns = joined("offsets_ps") / 1000
            start_ns += ts
            duration_ns = joined("durations_ps") / 1000
            return Line(_ids(joined("mids")), start_ns, duration_ns, _ids(joined("occurrences")), own)
    return scan_messages(line, off_id, dur_id, op_ids, snames)


def scan_messages(line: object, off_id: int, dur_id: int, op_ids: dict[int, str],
                  snames: dict[int, str]) -> Line:
    """:func:`scan` by the protobuf runtime's messages, one event at a time."""
    # array.array, not lists: no Python int object is kept per event.
    mids, offs, durs, occs = array("q"), array("q"), array("q"), array("q")
    add_mid, add_off, add_dur, add_occ = mids.append, offs.append, durs.append, occs.append
    own: dict[int, tuple[tuple[str, object], ...]] = {}
    i = -1
    for ev in line.events:  # type: ignore[attr-defined]
        i += 1
        add_mid(ev.metadata_id)
        n = ev.num_occurrences
        off = 0 if n else ev.offset_ps
        dur = ev.duration_ps
        stats = ev.stats
        if stats:
            extra = None
            for st in stats:
                sid = st.metadata_id
                if sid == off_id:
                    off = st.int64_value or st.uint64_value
                elif sid == dur_id:
                    dur = st.int64_value or st.uint64_value
                elif sid in op_ids:
                    if extra is None:
                        extra = []
                    extra.append((op_ids[sid], stat_value(st, snames)))
            if extra:
                own[i] = tuple(extra)
        add_off(off)
        add_dur(dur)
        add_occ(n or 1)
    ts = line.timestamp_ns  # type: ignore[attr-defined]
    return Line(_ids(np.frombuffer(mids, np.int64)), ts + np.frombuffer(offs, np.int64) / 1000,
                np.frombuffer(durs, np.int64) / 1000, _ids(np.frombuffer(occs, np.int64)), OwnStats(own))


def _ids(values: np.ndarray) -> np.ndarray:
    """Metadata ids and occurrence counts as int32 where they fit (they do but in a hostile file):
    a plane's line waits in memory while the one before becomes columns."""
    return narrowest(values, np.int32)
