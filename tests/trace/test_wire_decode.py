"""The columnar decode of a line's events (``trace/wire.py``) reads what the protobuf runtime reads.

The judge is protobuf itself: every line here is read twice from the same file, by the decoder and
by the runtime's parsed ``XEvent`` messages (``device_lines.scan_messages``), and the columns and each event's
op stats must be equal. Lines are written by the runtime's own serializer (random events: both
members of the ``data`` oneof, negative and 64-bit values, every kind of stat value) and by hand on
the wire where the serializer never writes so (fields out of order, a field repeated, the other
oneof member written after the first, unknown fields of each wire type), large enough to be cut in
chunks. Where the decoder must not guess (a group, a known field of another wire type, a str_value
that is not UTF-8, a line cut short) the read falls back to the runtime: same columns, or the same
one-line error for a corrupt file.

Each test runs twice: through the compiled reader (``trace/_xwire.c``, where the install built it)
and through numpy's (``trace/wire.py``), the one an install without a C compiler has.
"""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace import cwire, device, device_lines, stream
from hlo_doctor.trace import xplane_pb2 as xp
from hlo_doctor.trace.stream import CHUNK_BYTES, XSpaceFile
from hlo_doctor.trace.wire import Unread
from hlo_doctor.trace.xspace import stat_names

sys.path.insert(0, str(Path(__file__).parent))
from xspace_builder import field, varint  # noqa: E402

STATS = {1: "device_offset_ps", 2: "device_duration_ps", 3: "hlo_op", 4: "program_id", 5: "group_id",
         6: "flops", 7: "long_name", 8: "not_an_op_stat", 9: "hlo_module"}
OP_STATS = {k: v for k, v in STATS.items() if v in device._OP_STATS}


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The reader of a line's events that ``event_columns`` and ``device_lines.scan`` use."""
    if request.param == "compiled":
        if not cwire.COMPILED:
            pytest.skip("the compiled reader is not built in this install")
    else:
        monkeypatch.setattr(stream, "COMPILED", False)
        monkeypatch.setattr(device_lines, "WIRE_MIN_BYTES", 256 << 10)
    return str(request.param)


def _random_stat(rng: random.Random, st: xp.XStat) -> None:
    st.metadata_id = rng.choice(list(STATS) + [99])  # 99: no metadata
    kind = rng.randrange(8)
    if kind == 0:
        st.int64_value = rng.choice([0, 1, -1, -(1 << 63), (1 << 63) - 1, rng.randrange(1 << 50)])
    elif kind == 1:
        st.uint64_value = rng.choice([0, 1, (1 << 63) - 1, rng.randrange(1 << 40)])
    elif kind == 2:
        st.double_value = rng.choice([0.0, -1.5, 1e300, rng.random()])
    elif kind == 3:
        st.str_value = rng.choice(["", "fusion.3", "ünïcode ✓", "x" * 300])
    elif kind == 4:
        st.bytes_value = rng.choice([b"", b"\xff\xfe not utf-8", b"plain"])
    elif kind == 5:
        st.ref_value = rng.choice(list(STATS) + [12345])
    # kind 6, 7: no value at all


def _plane(events: list[bytes]) -> bytes:
    """An XSpace of one device plane whose one line holds ``events`` (wire bytes of XEvent)."""
    head = xp.XPlane(id=1, name="/device:TPU:0")
    for sid, name in STATS.items():
        head.stat_metadata[sid].id = sid
        head.stat_metadata[sid].name = name
    for mid in range(1, 6):
        head.event_metadata[mid].id = mid
        head.event_metadata[mid].name = f"op{mid}"
    line_head = xp.XLine(id=7, name="XLA Ops", timestamp_ns=1_000_000).SerializeToString()
    line = line_head + b"".join(field(4, e) for e in events) + field(11, "XLA Ops display")
    plane = head.SerializeToString() + field(3, line)
    return field(1, plane)


def _both(path: Path) -> tuple[object, object]:
    with XSpaceFile(path) as xs:
        (ref,) = [r for r in xs._planes() if r.name == "/device:TPU:0"]
        plane = xs.plane(ref)
        names = stat_names(plane)
        (line,) = plane.lines
        wire = list(line.event_columns(1, 2, OP_STATS, names))  # raises Unread where it falls back
        del wire
        return (device_lines.scan(line, 1, 2, OP_STATS, names), device_lines.scan_messages(line, 1, 2, OP_STATS, names))


def _equal(a: object, b: object) -> None:
    for name in ("mids", "start_ns", "duration_ns", "occurrences"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.own == b.own  # type: ignore[attr-defined]


def _serialized_events(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ev = xp.XEvent(metadata_id=rng.randrange(1, 6), duration_ps=rng.choice([0, rng.randrange(1 << 45), -5]))
        if rng.random() < 0.2:
            ev.num_occurrences = rng.choice([0, 1, 7])
        else:
            ev.offset_ps = rng.choice([0, rng.randrange(1 << 45), -(1 << 40)])
        for _ in range(rng.choice([0, 1, 2, 2, 3, 5])):
            _random_stat(rng, ev.stats.add())
        out.append(ev.SerializeToString())
    return out


def _large(events: list[bytes]) -> list[bytes]:
    """``events`` repeated until the line is cut in several chunks."""
    size = sum(len(e) + 3 for e in events)
    return events * (int(1.5 * CHUNK_BYTES) // max(size, 1) + 1)


@pytest.mark.parametrize("seed", [0, 1])
def test_events_the_serializer_writes_read_as_the_runtime_reads_them(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "a.xplane.pb"
    path.write_bytes(_plane(_large(_serialized_events(4000, seed))))
    wire, messages = _both(path)
    assert len(messages.mids) > 100_000  # type: ignore[attr-defined]
    _equal(wire, messages)


def _hand_written() -> list[bytes]:
    stat_off = field(1, 1) + field(4, 123_456_789)
    stat_dur = field(3, 999) + field(1, 2)  # value before the id
    op = field(1, 3) + field(5, "fusion.7")
    unknown = (field(15, 5) + varint(16 << 3 | 1) + struct.pack("<d", 2.5) + varint(17 << 3 | 5) + b"\x01\x02\x03\x04"
               + field(200, b"long tag"))
    return [
        # Fields out of order, a stat before the id, duration written twice (the last wins).
        field(4, stat_dur) + field(3, 11) + field(1, 2) + field(3, 12) + field(2, 500),
        # The data oneof: offset, then num_occurrences (offset reads 0), and the other way round.
        field(1, 1) + field(2, 700) + field(5, 3) + field(4, stat_off),
        field(1, 1) + field(5, 3) + field(2, 700),
        # Unknown fields of every wire type but groups, in the event and in a stat.
        field(1, 4) + unknown + field(4, op + unknown) + field(2, 40) + field(3, 41),
        # A stat whose value oneof is written twice (the last member wins), an empty stat, an empty event.
        field(1, 5) + field(4, field(1, 1) + field(3, 10) + field(4, 77)) + field(4, b""),
        b"",
        # Negative values on ten bytes, an op stat with a ref value and one with a double.
        field(1, 2) + field(2, -3) + field(3, -(1 << 62)) + field(4, field(1, 5) + field(7, 3))
        + field(4, field(1, 6) + field(2, 1.25)),
    ]


def test_events_written_by_hand_on_the_wire_read_as_the_runtime_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "b.xplane.pb"
    path.write_bytes(_plane(_large(_hand_written())))
    wire, messages = _both(path)
    _equal(wire, messages)
    own = messages.own  # type: ignore[attr-defined]
    assert own[3] == (("hlo_op", "fusion.7"),) and own[6] == (("group_id", "hlo_op"), ("flops", 1.25))


@pytest.mark.parametrize("bad", ["group", "wire type", "utf-8"])
def test_what_the_decoder_does_not_read_falls_back_to_the_runtime(tmp_path: Path, bad: str) -> None:
    events = _hand_written()
    odd = {
        "group": field(1, 1) + varint(9 << 3 | 3) + field(1, 5) + varint(9 << 3 | 4),
        "wire type": field(1, 1) + field(2, b"an offset as bytes"),
        "utf-8": field(1, 1) + field(4, field(1, 3) + field(5, b"\xff\xfe")),
    }[bad]
    path = tmp_path / "c.xplane.pb"
    path.write_bytes(_plane(_large([*events, odd])))
    with XSpaceFile(path) as xs:
        (ref,) = [r for r in xs._planes() if r.name == "/device:TPU:0"]
        plane = xs.plane(ref)
        (line,) = plane.lines
        with pytest.raises(Unread):
            list(line.event_columns(1, 2, OP_STATS, stat_names(plane)))
        try:
            expected = device_lines.scan_messages(line, 1, 2, OP_STATS, stat_names(plane))
        except InputError as exc:  # the runtime rejects it: so must the read
            with pytest.raises(InputError) as got:
                device_lines.scan(line, 1, 2, OP_STATS, stat_names(plane))
            assert got.value.what == exc.what
            return
        _equal(device_lines.scan(line, 1, 2, OP_STATS, stat_names(plane)), expected)


def test_a_line_cut_short_is_the_same_one_line_error(tmp_path: Path) -> None:
    data = _plane(_large(_hand_written()))
    path = tmp_path / "d.xplane.pb"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as exc:
        with XSpaceFile(path) as xs:
            for ref in xs._planes():
                plane = xs.plane(ref)
                for line in plane.lines:
                    device_lines.scan(line, 1, 2, OP_STATS, stat_names(plane))
    assert "d.xplane.pb" in exc.value.what and "\n" not in exc.value.what
