"""The compiled walk that finds each event's enclosing span (``_xsegments.enclosing``: an op's module
run, an event's step mark) against numpy's ``searchsorted``, which it replaces and which judges it."""

from __future__ import annotations

import numpy as np
import pytest

from hlo_doctor.opstats.steps import _label
from hlo_doctor.trace import cwire

pytestmark = pytest.mark.skipif(not cwire.SEGMENTS_COMPILED, reason="the compiled walk is not built in this install")


def _numpy(span_starts: np.ndarray, span_ends: np.ndarray, starts: np.ndarray) -> np.ndarray:
    run = np.searchsorted(span_starts, starts, side="right") - 1
    inside = (run >= 0) & (span_ends[np.maximum(run, 0)] >= starts)
    run[~inside] = -1
    return run


@pytest.mark.parametrize("seed", range(6))
def test_random_spans_and_events(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for trial in range(200):
        m, n = int(rng.integers(1, 40)), int(rng.integers(0, 500))
        span_starts = np.sort(rng.integers(0, 100, m).astype(np.float64))  # ties among the spans' starts
        span_ends = span_starts + rng.integers(-3, 25, m)  # spans that overlap, end before they start
        starts = rng.integers(-5, 110, n).astype(np.float64) + rng.choice([0.0, 0.5], n)
        if trial % 3:
            starts = np.sort(starts)  # a device line's order, with runs of equal starts
        got = cwire.enclosing_runs(span_starts, span_ends, starts)
        assert got is not None and got.dtype == np.int64
        assert np.array_equal(got, _numpy(span_starts, span_ends, starts)), (seed, trial)


def test_nan_is_left_to_numpy() -> None:
    spans = np.array([0.0, 10.0])
    assert cwire.enclosing_runs(spans, spans + 5, np.array([1.0, np.nan])) is None
    assert cwire.enclosing_runs(np.array([0.0, np.nan]), spans, np.array([1.0])) is None


def test_step_labels_are_numpy_s() -> None:
    rng = np.random.default_rng(7)
    mark_starts = np.sort(rng.integers(0, 1000, 50).astype(np.float64))
    mark_ends = mark_starts + rng.integers(1, 40, 50)
    labels = np.arange(50, dtype=np.int64) * 3
    starts = rng.integers(-10, 1100, 5000).astype(np.float64)
    out = np.full(5000, -1, np.int32)
    _label(out, starts, mark_starts, mark_ends, labels)
    idx = _numpy(mark_starts, mark_ends, starts)
    expected = np.where(idx >= 0, labels[np.maximum(idx, 0)], -1)
    assert np.array_equal(out, expected)
