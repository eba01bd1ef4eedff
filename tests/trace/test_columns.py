"""The op-event columns (``trace/columns.py``): a line in order and the same line shuffled give the same
columns (a line already in order skips the sort), and ``unique_inverse`` is ``np.unique``'s answer."""

from __future__ import annotations

import numpy as np
import pytest

from hlo_doctor.trace.columns import OpColumns, unique_inverse


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
