"""The op-event columns (``trace/columns.py``): a line in order and the same line shuffled give the same
columns (a line already in order skips the sort); ``unique_inverse``, ``unique_values`` and ``searchsorted``
give numpy's answers; a line's integer stats kept as rows read as the dict of them does."""

from __future__ import annotations

import numpy as np
import pytest

from hlo_doctor.trace.columns import OpColumns, searchsorted, unique_inverse, unique_values
from hlo_doctor.trace.wire import OwnStats


def _columns(order: np.ndarray, start: np.ndarray, duration: np.ndarray) -> list[np.ndarray]:
    cols = OpColumns()
    n = len(start)
    codes = np.arange(n, dtype=np.int64)
    cols.add("h", "d", codes[order] % 3, codes[order] % 5, codes[order], start[order], duration[order],
             codes[order] % 7, codes[order] % 2 + 1)
    return [column[0] for column in cols.chunks]  # the line's arrays, codes and times, as added


@pytest.mark.parametrize("seed", [0, 1])
def test_a_line_in_order_and_shuffled_give_the_same_columns(seed: int) -> None:
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 50, 400)).astype(np.float64)  # ties: the longer event first
    duration = (rng.permutation(400) + 1).astype(np.float64)  # distinct: one order of the events
    sorted_order = np.lexsort((-duration, start))
    in_order = _columns(sorted_order, start, duration)
    shuffled = _columns(rng.permutation(400), start, duration)
    for a, b in zip(in_order, shuffled, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("values", [[5, 3, 5, 9, -2, 3], [1 << 40, 7, 1 << 40], [0], list(range(100, 0, -1))])
def test_unique_inverse_is_numpys(values: list[int]) -> None:
    a = np.array(values, np.int64)
    got, want = unique_inverse(a), np.unique(a, return_inverse=True)
    assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("values", [[5, 3, 5, 9, -2, 3], [1 << 40, 7, 1 << 40], [0], list(range(100, 0, -1))])
def test_unique_values_is_numpys(values: list[int]) -> None:
    a = np.array(values, np.int64)
    got, want = unique_values(a), np.unique(a)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_is_numpys(seed: int, side: str) -> None:
    # Events (many, sorted or not, with ties and values on the boundaries) against boundaries (few).
    rng = np.random.default_rng(seed)
    bounds = np.sort(rng.integers(0, 1000, int(rng.integers(1, 300)))).astype(np.float64)
    events = np.concatenate([rng.integers(-10, 1010, 5000).astype(np.float64), bounds])
    if seed % 2 == 0:
        events = np.sort(events)
    for haystack, needles in ((bounds, events), (np.zeros(0), events), (bounds, events[:10])):
        got, want = searchsorted(haystack, needles, side=side), np.searchsorted(haystack, needles, side=side)
        assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(4))
def test_integer_stats_as_rows_read_as_their_dict(seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = {7: "group_id", 9: "program_id", 11: "group_id"}  # two stat ids of one name: the last wins
    events = np.sort(rng.integers(0, 40, 120))
    sids = rng.choice(list(names), 120)
    values = rng.integers(-5, 1 << 40, 120)
    rows = OwnStats(rows=(events, sids, values), names=names)
    as_dict: dict[int, list[tuple[str, object]]] = {}
    for e, s, v in zip(events.tolist(), sids.tolist(), values.tolist(), strict=True):
        as_dict.setdefault(e, []).append((names[s], v))
    want = {e: tuple(items) for e, items in as_dict.items()}
    assert rows == want and dict(rows) == want
    for name in ("group_id", "program_id", "run_id"):
        got = rows.last(name, 45)
        assert got is not None
        has, value = got
        for e in range(45):
            held = dict(want.get(e, ())).get(name)
            assert bool(has[e]) == (held is not None) and (held is None or int(value[e]) == held)
    joined = OwnStats.joined([rows, OwnStats({50: (("group_id", "x"),)})])
    assert joined.last("group_id", 51) is None and joined[50] == (("group_id", "x"),) and joined[events[0]] == want[events[0]]
