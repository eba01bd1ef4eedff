"""Self times of nested events (``columns.self_times``) in the compiled walk
(``_xsegments.self_times``) against the Python walk it replaces, which judges it: the same floats, to
the bit, on nested and hostile (overlapping, NaN) lines. A host thread's event times by numpy against
Python's integer arithmetic, likewise. (The real captures, compiled against the numpy reader, are
tests/trace/test_readers_agree.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from hlo_doctor.trace import cwire, python_frames
from hlo_doctor.trace.columns import self_times

compiled = pytest.mark.skipif(not cwire.SEGMENTS_COMPILED, reason="the compiled walk is not built in this install")


def _python(starts: np.ndarray, durations: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setattr(cwire, "_xsegments", None)
        return self_times(starts, durations)


def _nested(rng: np.random.Generator, start: float, end: float, depth: int, out: list[tuple[float, float]]) -> None:
    """Properly nested children of [start, end), in start order, longest first on a tie."""
    t = start
    while t < end and depth < 6:
        if rng.random() < 0.3:
            t += float(rng.integers(0, 4)) + rng.choice([0.0, 0.25, 0.1])
            continue
        length = min(end - t, float(rng.integers(0, 30)) + rng.choice([0.0, 0.5, 0.3]))
        out.append((t, length))
        _nested(rng, t, t + length, depth + 1, out)
        t += length


@compiled
@pytest.mark.parametrize("seed", range(4))
def test_nested_lines(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    walked = 0
    for trial in range(40):
        events: list[tuple[float, float]] = []
        _nested(rng, float(rng.integers(0, 1000)), 300 + float(rng.integers(0, 600)), 0, events)
        if trial % 4 == 0 and events:  # hostile: overlapping, not nested; negative and NaN durations
            k = int(rng.integers(0, len(events)))
            events[k] = (events[k][0], events[k][1] * 3 + 1)
            if trial % 8 == 0:
                events[int(rng.integers(0, len(events)))] = (events[0][0], float("nan"))
                events[int(rng.integers(0, len(events)))] = (events[-1][0], -2.5)
        starts = np.array([e[0] for e in events], np.float64)
        durations = np.array([e[1] for e in events], np.float64)
        got = self_times(starts, durations)
        want = _python(starts, durations, monkeypatch)
        assert got.dtype == want.dtype == np.float64
        assert got.tobytes() == want.tobytes(), (seed, trial)
        walked += got is not durations  # the same array back: nothing nested, nothing walked
    assert walked >= 20


@compiled
def test_deep_nesting_grows_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 5000  # each event inside the one before it: the walk's stack is the line's length
    starts = np.arange(n, dtype=np.float64) * 0.5
    durations = 1e4 - starts * 1.5
    assert self_times(starts, durations).tobytes() == _python(starts, durations, monkeypatch).tobytes()


@compiled
def test_other_dtypes_are_walked_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    starts, durations = np.array([0, 1, 2], np.int64), np.array([10, 3, 1], np.int64)
    assert cwire.nested_self_times(starts, durations) is None
    assert self_times(starts, durations).tolist() == [7.0, 2.0, 1.0]


def _loop_times(base: int, offsets: list[int], durations: list[int]) -> tuple[list[float], list[float]]:
    starts = [(base + off) / 1000 for off in offsets]
    return starts, [s + d / 1000 for s, d in zip(starts, durations, strict=True)]


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_host_times_by_numpy_are_the_integer_loops(dtype: type) -> None:
    """A host thread's event times (python_frames.exact_times) against Python's exact integer
    arithmetic, which the message loop uses: the same floats, up to float64's exact range, and left to
    that loop beyond it."""
    rng = np.random.default_rng(7)
    edge = 1 << 53
    for base in (0, 16185885000, 92466 * 1000, edge - 5000, 1_700_000_000_000_000 * 1000):
        offsets = rng.integers(0, 10**12, 2000).astype(dtype)
        durations = rng.integers(0, 10**9, 2000).astype(dtype)
        offsets[:7] = np.array([0, 1, 499, 500, 501, 999, 1500], dtype)
        got = python_frames.exact_times(base, offsets, durations)
        want = _loop_times(base, offsets.tolist(), durations.tolist())
        if base + int(offsets.max()) > edge:
            assert got is None, base
            continue
        assert got is not None
        assert got[0].tolist() == want[0] and got[1].tolist() == want[1], base
    assert python_frames.exact_times(0, np.array([edge + 1], np.int64), np.array([1], np.int64)) is None
    assert python_frames.exact_times(0, np.array([-edge - 1], np.int64), np.array([1], np.int64)) is None
    assert python_frames.exact_times(0, np.array([1], np.int64), np.array([edge + 1], np.uint64)) is None
    got = python_frames.exact_times(10**6, np.array([-3, 7], np.int64), np.array([-5, 2], np.int64))
    assert got is not None and (got[0].tolist(), got[1].tolist()) == _loop_times(10**6, [-3, 7], [-5, 2])


@compiled
@pytest.mark.parametrize("seed", range(3))
def test_parents_and_flagged_ancestors_are_the_loops(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread's nesting (``intervals.parents``, ``intervals.inside``) by the compiled walks, against
    the Python loops they replace: nested lines with ties, overlaps and NaN."""
    from hlo_doctor.lint import intervals
    from hlo_doctor.trace.python_frames import DriverThread

    rng = np.random.default_rng(seed)
    events: list[tuple[float, float]] = []
    _nested(rng, 0.0, 400.0 + float(rng.integers(0, 400)), 0, events)
    if seed == 2:
        events.append((events[-1][0], float("nan")))
    starts = np.array([e[0] for e in events])
    ends = starts + np.array([e[1] for e in events])
    thread = DriverThread("h", "/host:CPU", "python", starts, ends, np.zeros(len(starts), np.int32), ("$a.py:1 f",), 0, 0)
    flag = rng.random(len(starts)) < 0.2
    got = intervals.parents(thread), intervals.inside(intervals.parents(thread), flag)
    with monkeypatch.context() as m:
        m.setattr(cwire, "_xsegments", None)
        want = intervals.parents(thread), intervals.inside(intervals.parents(thread), flag)
    assert (got[0] >= 0).sum() > 10 and got[1].any()
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
