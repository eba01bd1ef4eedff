"""The compiled reader of a line's events (``trace/_xwire.c``) against the protobuf runtime, byte by byte.

The judge is protobuf: a line's bytes are parsed by the runtime (``XLine``) and decoded by the
compiled reader, and where both read them the columns and each event's op stats must be equal. The
bytes are random events written by the runtime's serializer, then every prefix of them (a line cut
at each byte), and random corruptions (bytes overwritten, lengths made larger than what follows):
the reader must then say it cannot read them (the runtime decides) or read what the runtime reads;
it never reads past the bytes it is given (each call gets exactly the bytes of a line, and a cut line
must never yield an event the cut removed). Chunked reads (a field cut by a chunk's end) give what
one read of the whole line gives.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from hlo_doctor.trace import cwire
from hlo_doctor.trace.wire import Unread
from hlo_doctor.trace.xspace import XLINE

sys.path.insert(0, str(Path(__file__).parent))
from test_wire_decode import OP_STATS, STATS, _serialized_events  # noqa: E402
from xspace_builder import field  # noqa: E402

pytestmark = pytest.mark.skipif(not cwire.COMPILED, reason="the compiled reader is not built in this install")


def _runtime(data: bytes) -> tuple[list[tuple[int, int, int, int]], dict[int, tuple[tuple[str, object], ...]]] | None:
    """(metadata id, offset, duration, occurrences) per event and the op stats, as the parsed
    messages read them (``device._scan_messages``); None where the runtime rejects the bytes."""
    from hlo_doctor.trace.xspace import stat_value

    try:
        line = XLINE.FromString(data)
    except (DecodeError, ValueError):
        return None
    rows, own = [], {}
    for i, ev in enumerate(line.events):
        n = ev.num_occurrences
        off, dur, extra = 0 if n else ev.offset_ps, ev.duration_ps, []
        for st in ev.stats:
            if st.metadata_id == 1:
                off = st.int64_value or st.uint64_value
            elif st.metadata_id == 2:
                dur = st.int64_value or st.uint64_value
            elif st.metadata_id in OP_STATS:
                extra.append((OP_STATS[st.metadata_id], stat_value(st, STATS)))
        if extra:
            own[i] = tuple(extra)
        rows.append((ev.metadata_id, off, dur, n or 1))
    return rows, own


def _compiled(data: bytes, chunk: int = 1 << 22) -> tuple[list[tuple[int, int, int, int]], dict] | None:
    """The same through the compiled reader (``cwire.line_columns``); None where it leaves the
    bytes to the runtime."""
    try:
        parts = list(cwire.line_columns(lambda at, n: data[at:at + n], 0, len(data), 1, 2, OP_STATS, STATS, chunk))
    except Unread:
        return None
    rows: list[tuple[int, int, int, int]] = []
    own: dict = {}
    for p in parts:
        rows.extend(zip(p.mids.tolist(), p.offsets_ps.tolist(), p.durations_ps.tolist(), p.occurrences.tolist(),
                        strict=True))
        own.update(p.own)
    return rows, own


def _line(n: int, seed: int) -> bytes:
    return b"".join(field(4, e) for e in _serialized_events(n, seed)) + field(11, "XLA Ops")


def _same_or_left(data: bytes) -> str:
    """'read' where both read ``data`` alike, 'left' where the compiled reader leaves it to the runtime."""
    got = _compiled(data)
    if got is None:
        return "left"
    assert repr(got) == repr(_runtime(data))  # repr: a NaN double reads equal to itself
    return "read"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_lines_read_as_the_runtime_reads_them(seed: int) -> None:
    assert _same_or_left(_line(300, seed)) == "read"


def test_every_cut_of_a_line_is_left_to_the_runtime_or_read_alike() -> None:
    data = _line(40, 3)
    seen = {_same_or_left(data[:k]) for k in range(len(data) + 1)}
    assert seen == {"read", "left"}


@pytest.mark.parametrize("seed", range(4))
def test_corrupted_lines_are_left_to_the_runtime_or_read_alike(seed: int) -> None:
    rng = random.Random(seed)
    data = _line(60, seed)
    seen = set()
    for _ in range(400):
        b = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 4])):
            at = rng.randrange(len(b))
            b[at] = rng.choice([0x00, 0x7F, 0x80, 0xFF, 0x22, 0x0A, 0x12, 0x1A, 0x23, 0x24, rng.randrange(256)])
        seen.add(_same_or_left(bytes(b)))
    assert "left" in seen


def test_oversized_lengths_are_left_to_the_runtime() -> None:
    event = field(1, 3) + field(4, field(1, 3) + field(5, "fusion"))
    for length in (len(event) + 1, 1 << 20, (1 << 63) - 1, (1 << 64) - 1):
        from xspace_builder import varint

        data = varint(4 << 3 | 2) + varint(length) + event
        assert _compiled(data) is None and _runtime(data) is None
    # A stat whose length reaches past its event (but not past the line).
    inner = field(1, 3) + varint(4 << 3 | 2) + varint(50) + field(1, 3)
    data = field(4, inner) + field(11, "x" * 60)
    assert _compiled(data) is None and _runtime(data) is None


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_chunked_reads_give_the_whole_read(chunk: int) -> None:
    data = _line(200, 4)
    assert _compiled(data, chunk) == _compiled(data) == _runtime(data)


def test_a_ten_byte_varint_limit() -> None:
    long_varint = bytes([0x80] * 10 + [0x01])  # eleven bytes
    data = field(4, bytes([1 << 3]) + long_varint)
    assert _compiled(data) is None
    assert np.array_equal(np.array(_compiled(field(4, field(1, -1)))[0]), np.array([(-1, 0, 0, 1)]))
