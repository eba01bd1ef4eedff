"""The compiled walk that finds each event's enclosing span (``_xsegments.enclosing``: an op's module
run, an event's step mark) against numpy's ``searchsorted``, which it replaces and which judges it."""

from __future__ import annotations

from pathlib import Path

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


@pytest.fixture(scope="module")
def four_chips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-chip TPU host file of about 1 MB with a ``Steps`` line per chip (the generated trace of
    benchmarks/bench_device_trace.py, the layout libtpu writes)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_device_trace

    return bench_device_trace.generate(tmp_path_factory.mktemp("four-chips") / "host.xplane.pb", size_mb=1.0, cores=4)


@pytest.mark.parametrize("interleaved", [False, True])
def test_device_steps_label_each_event_by_its_own_devices_marks(interleaved: bool, four_chips: Path) -> None:
    """``steps_from_marks`` of a 4-chip TPU host's ``Steps`` marks, against each event looked up one at a
    time among its own device's marks; the devices' events one run each (as read), and interleaved
    (no run to find: each group's events by a mask)."""
    import dataclasses

    from hlo_doctor.hosts.work import combine_hosts
    from hlo_doctor.opstats.steps import steps_from_marks
    from hlo_doctor.trace.columns import OpColumns
    from hlo_doctor.trace.model import Coded
    from hlo_doctor.trace.read import read_host

    path = four_chips
    cols = OpColumns()
    trace = combine_hosts([read_host(path, cols)], cols.finish())
    ops = trace.ops
    if interleaved:
        order = np.argsort(ops.start_ns, kind="stable")
        coded = {f.name: Coded(np.asarray(getattr(ops, f.name).codes)[order], getattr(ops, f.name).categories)
                 for f in dataclasses.fields(ops) if isinstance(getattr(ops, f.name), Coded)}
        ops = dataclasses.replace(ops, **coded, start_ns=ops.start_ns[order], duration_ns=ops.duration_ns[order])
    step_of, _, count = steps_from_marks(trace.device_steps, ops, by_device=True)
    devices = np.asarray(ops.device.categories, object)[np.asarray(ops.device.codes)]
    want = np.full(len(ops), -1, np.int64)
    for device in set(devices.tolist()):
        marks = sorted((m for m in trace.device_steps if m.device == device), key=lambda m: m.start_ns)
        starts = np.asarray([m.start_ns for m in marks])
        ends = starts + np.asarray([m.duration_ns for m in marks])
        mine = np.flatnonzero(devices == device)
        k = np.searchsorted(starts, ops.start_ns[mine], side="right") - 1
        inside = (k >= 0) & (ends[np.maximum(k, 0)] >= ops.start_ns[mine])
        labels = np.asarray([m.step_num for m in marks])
        want[mine[inside]] = labels[k[inside]]
    assert count > 1 and (want >= 0).any() and len(set(devices.tolist())) > 1
    assert np.array_equal(step_of, want)
