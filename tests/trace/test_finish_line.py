"""The compiled join of a line's chunks (``_xwire.finish_line``) gives the columns the numpy passes
give (``device_lines.scan`` before it: concatenate, ``/ 1000``, ``+= timestamp``, narrowed to int32
where every value fits): the same types and the same floats, to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from hlo_doctor.trace.columns import narrowest
from hlo_doctor.trace.cwire import FINISH

pytestmark = pytest.mark.skipif(FINISH is None, reason="the compiled reader is not built in this install")


def _numpy(chunks: list[list[np.ndarray]], ts: int) -> tuple[np.ndarray, ...]:
    def joined(arrays: list[np.ndarray]) -> np.ndarray:
        if len(arrays) == 1:
            return arrays[0]
        return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

    mids, offs, durs, occs = (joined(c) for c in chunks)
    start_ns = offs / 1000
    start_ns += ts
    return narrowest(mids, np.int32), start_ns, durs / 1000, narrowest(occs, np.int32)


def _compiled(chunks: list[list[np.ndarray]], ts: int) -> tuple[np.ndarray, ...]:
    assert FINISH is not None
    mids, mids_wide, start_ns, duration_ns, occs, occs_wide = FINISH(*chunks, ts)
    out = (np.frombuffer(mids, np.int64 if mids_wide else np.int32), np.frombuffer(start_ns, np.float64),
           np.frombuffer(duration_ns, np.float64), np.frombuffer(occs, np.int64 if occs_wide else np.int32))
    assert all(a.flags.writeable for a in out)  # the readers change columns in place
    return out


@pytest.mark.parametrize("seed", range(6))
def test_random_chunks_join_as_numpys_passes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(0, 5000)) for _ in range(int(rng.integers(1, 6)))]
    wide = seed % 2 == 1  # some columns with values past int32 (uint64 ids read as negative int64s too)
    ts = int(rng.choice([0, 1_733_000_000_000_000_000, (1 << 62) + 12345, -(10**15)]))

    def ints(n: int, big: bool) -> np.ndarray:
        v = rng.integers(-(1 << 62) if big else 0, (1 << 62) if big else 1 << 20, n, dtype=np.int64)
        return v

    chunks = [[ints(n, wide) for n in sizes], [ints(n, True) for n in sizes],
              [rng.integers(0, 1 << 53, n, dtype=np.int64) for n in sizes],
              [np.where(c == 0, 1, c) for c in (ints(n, wide and seed > 2) for n in sizes)]]
    want, got = _numpy(chunks, ts), _compiled(chunks, ts)
    for w, g in zip(want, got, strict=True):
        assert w.dtype == g.dtype
        assert w.tobytes() == g.tobytes()


def test_no_chunks_and_one_empty_chunk() -> None:
    for chunks in ([[], [], [], []], [[np.zeros(0, np.int64)] for _ in range(4)]):
        want, got = _numpy(chunks, 5), _compiled(chunks, 5)
        assert [a.dtype for a in got] == [a.dtype for a in want] and all(len(a) == 0 for a in got)


def test_columns_of_different_lengths_are_refused() -> None:
    assert FINISH is not None
    one, two = np.ones(1, np.int64), np.ones(2, np.int64)
    with pytest.raises(ValueError, match="lengths"):
        FINISH([one], [two], [one], [one], 0)
    with pytest.raises(ValueError, match="int64"):
        FINISH([np.ones(3, np.int8)], [one], [one], [one], 0)
