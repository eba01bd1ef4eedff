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


TS = 1_700_000_000_123_456_789  # a line's timestamp_ns (above 2**53: its float is rounded)


def _one_pass(data: bytes, chunk: int = 1 << 22) -> tuple[list[tuple[int, float, float, int]], dict] | str | None:
    """The same through the compiled reader's one pass (``cwire.line_events``): (id, start ns,
    duration ns, occurrences) per event and the op stats; None where it leaves the bytes to the
    runtime, "wide" where it leaves them to ``line_columns`` (an id or count past int32)."""
    try:
        def read_into(at: int, n: int, buf: bytearray) -> memoryview:
            buf[:n] = data[at:at + n]  # as the reader's source does: into the reused buffer
            return memoryview(buf)[:n]

        got = cwire.line_events(read_into, 0, len(data), 1, 2, OP_STATS, STATS, chunk, TS)
    except Unread:
        return None
    if got is None:
        return "wide"
    mids, starts, durations, occurrences, own = got
    assert (mids.dtype, starts.dtype, durations.dtype, occurrences.dtype) == (np.int32, np.float64, np.float64, np.int32)
    return list(zip(mids.tolist(), starts.tolist(), durations.tolist(), occurrences.tolist(), strict=True)), dict(own)


def _as_read(rows: list[tuple[int, int, int, int]], own: dict) -> tuple[list[tuple[int, float, float, int]], dict] | str:
    """The runtime's rows as the reader's numpy path makes a device line of them (device_lines.scan):
    starts ``offset / 1000 + TS``, durations ``/ 1000``; "wide" where an id or a count needs int64."""
    if any(not -(1 << 31) <= v < (1 << 31) for mid, _, _, occ in rows for v in (mid, occ)):
        return "wide"
    starts = np.asarray([r[1] for r in rows], np.int64) / 1000
    starts += TS
    durations = np.asarray([r[2] for r in rows], np.int64) / 1000
    return list(zip([r[0] for r in rows], starts.tolist(), durations.tolist(), [r[3] for r in rows], strict=True)), own


def _same_or_left(data: bytes) -> str:
    """'read' where both read ``data`` alike, 'left' where the compiled reader leaves it to the runtime
    (its one pass too, the same bytes: both walk a line alike)."""
    got, one = _compiled(data), _one_pass(data)
    if got is None:
        assert one is None
        return "left"
    assert repr(got) == repr(_runtime(data))  # repr: a NaN double reads equal to itself
    assert repr(one) == repr(_as_read(*got))
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
    assert _one_pass(data, chunk) == _one_pass(data) == _as_read(*_runtime(data))  # type: ignore[misc]


def test_the_one_pass_grows_its_columns_past_its_first_guess() -> None:
    # 5,000 events of 4 bytes: the first guess (a 30-byte event, at least 1,024) is short 4 times over.
    data = b"".join(field(4, field(1, k % 100 + 1) + field(3, k)) for k in range(5000)) + field(11, "XLA Ops")
    for chunk in (1 << 22, 333):
        got = _one_pass(data, chunk)
        assert got == _as_read(*_runtime(data))  # type: ignore[misc]
        assert len(got[0]) == 5000  # type: ignore[index]


@pytest.mark.parametrize("event", [field(1, 1 << 31), field(1, -(1 << 31) - 1), field(1, 3) + field(5, 1 << 31)])
def test_ids_and_counts_past_int32_are_left_to_the_columns_reader(event: bytes) -> None:
    data = field(4, field(1, 2)) + field(4, event) + field(4, field(1, 4))
    assert _one_pass(data) == "wide"
    assert _compiled(data) == _runtime(data)


def test_a_ten_byte_varint_limit() -> None:
    long_varint = bytes([0x80] * 10 + [0x01])  # eleven bytes
    data = field(4, bytes([1 << 3]) + long_varint)
    assert _compiled(data) is None
    assert np.array_equal(np.array(_compiled(field(4, field(1, -1)))[0]), np.array([(-1, 0, 0, 1)]))


def test_a_read_larger_than_the_kept_buffer_is_not_kept() -> None:
    # One event larger than what a thread keeps for its reads (8 MiB): read, and the buffer not kept.
    big = field(4, field(1, 5) + field(4, field(1, 3) + field(5, "x" * (9 << 20))))
    data = big + field(4, field(1, 6)) + field(11, "XLA Ops")
    before = getattr(cwire._buffers, "buf", None)
    assert _one_pass(data, 1 << 20) == _as_read(*_runtime(data))  # type: ignore[misc]
    kept = getattr(cwire._buffers, "buf", None)
    assert kept is before or len(kept) <= cwire._KEEP_BUFFER_BYTES
