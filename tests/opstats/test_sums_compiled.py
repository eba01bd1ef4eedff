"""The compiled op sums (``_xsums.chunk_sums``) against the numpy loop they replace.

The judge is ``_sums``'s own numpy loop (np.bincount a chunk at a time), run on the same events with
the compiled pass turned off: the same keys, the same steps and the same floats, to the bit. Inputs:
the hosts of real captures (a TPU v5e's four chips, an H200, XLA:CPU's threads) with the steps their
reads decide, the same events shuffled, with step labels far apart (a search, not a table), cut into
small chunks (a chunk over many steps), and with a code the numpy loop reads from an array's end
(the compiled pass then leaves the events to it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from hlo_doctor.opstats import totals
from hlo_doctor.trace.columns import OpColumns
from hlo_doctor.trace.model import Coded, Trace
from hlo_doctor.trace.read import find_xplanes, read_host

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"

pytestmark = pytest.mark.skipif(totals._xsums is None, reason="the compiled sums are not built in this install")


def _trace(capture: str) -> Trace:
    from hlo_doctor.hosts.work import combine_hosts
    (path, *_) = find_xplanes(SAMPLES / capture)
    cols = OpColumns()
    read = read_host(path, cols)
    return combine_hosts([read], cols.finish())


def _steps(trace: Trace) -> np.ndarray:
    choice = totals.choose_steps(totals.step_evidence(trace))
    if choice.source == "annotation":
        return totals.steps_from_marks(trace.steps, trace.ops, by_device=False, name=choice.name)[0]
    if choice.source == "device-steps":
        return totals.steps_from_marks(trace.device_steps, trace.ops, by_device=True)[0]
    return totals.steps_from_executions(trace.ops.frame(), choice.main)[0]


def _alike(trace: Trace, step_of: np.ndarray, monkeypatch: pytest.MonkeyPatch, *, compiled: bool = True) -> None:
    calls: list[bool] = []
    real = totals._compiled_sums

    def spy(*args: object, **kwargs: object) -> bool:
        calls.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return calls[-1]
    with monkeypatch.context() as m:
        m.setattr(totals, "_compiled_sums", spy)
        got = totals._sums(trace, step_of)
    assert calls == [compiled]  # (the compiled pass ran, or left the events to the loop)
    with monkeypatch.context() as m:
        m.setattr(totals, "_xsums", None)
        want = totals._sums(trace, step_of)
    assert got["keys"] == want["keys"]
    for name in ("occurrences", "total_ns", "self_ns", "devices", "steps", "step_ns"):
        a, b = got[name], want[name]
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), name


@pytest.mark.parametrize("capture", ["tpu_v5e_original", "gpu_h200_original", "engine_b64_original_a",
                                     "tpu_v5e_seed_b512"])
def test_real_hosts_sum_alike(capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(capture)
    step_of = _steps(trace)
    assert (step_of >= 0).any()
    _alike(trace, step_of, monkeypatch)


def _shuffled(trace: Trace, rng: np.random.Generator) -> Trace:
    ops = trace.ops
    order = rng.integers(0, len(ops), 20 * len(ops))  # (each event about 20 times: many per cell)
    coded = {f.name: Coded(np.asarray(getattr(ops, f.name).codes)[order], getattr(ops, f.name).categories)
             for f in dataclasses.fields(ops) if isinstance(getattr(ops, f.name), Coded)}
    arrays = {name: getattr(ops, name)[order] for name in ("start_ns", "duration_ns", "run_id", "occurrences")}
    # Times that are not whole nanoseconds (a capture's mostly are: their sums are exact in any order,
    # so only these tell one order of adding from another).
    arrays["duration_ns"] = arrays["duration_ns"] * (1 + rng.random(len(order)) / 7) + rng.random(len(order)) / 3
    self_ns = arrays["duration_ns"] * rng.random(len(order))
    return dataclasses.replace(trace, ops=dataclasses.replace(ops, **coded, **arrays, self_ns=self_ns))


@pytest.mark.parametrize("seed", range(4))
def test_shuffled_events_far_labels_and_small_chunks_sum_alike(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events out of order and repeated (every chunk spans many steps and devices, each cell sums
    events of many chunks), times of fractional
    nanoseconds, labels 10^9 apart (no table of places: a search), chunks of 13 events (the last one
    short)."""
    rng = np.random.default_rng(seed)
    trace = _shuffled(_trace("tpu_v5e_original" if seed % 2 else "gpu_h200_original"), rng)
    n = len(trace.ops)
    step_of = rng.integers(-1, 8, n).astype(np.int64)
    if seed >= 2:
        step_of = np.where(step_of >= 0, step_of * 1_000_000_007, -1)
    monkeypatch.setattr(totals, "_CHUNK", 13)
    _alike(trace, step_of, monkeypatch)


def test_a_code_read_from_the_end_is_left_to_the_numpy_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device code of -1 (what a hostile file's columns could hold): numpy reads ``on_device``'s
    last column for it; the compiled pass returns without a figure, its outputs zeroed, and the loop's
    answer stands."""
    trace = _trace("tpu_v5e_original")
    ops = trace.ops
    codes = np.asarray(ops.device.codes).copy()
    codes[len(codes) // 2] = -1
    trace = dataclasses.replace(trace, ops=dataclasses.replace(ops, device=Coded(codes, ops.device.categories)))
    _alike(trace, _steps(trace), monkeypatch, compiled=False)


@pytest.mark.parametrize("capture", ["tpu_v5e_original", "gpu_h200_original", "engine_b64_original_a"])
def test_the_breakdown_built_beside_the_sums_is_the_same(capture: str) -> None:
    """A host's part read with its breakdown in a thread beside the sums (``overlap``, as a worker or
    a one-host read does) holds what the sequential read holds: the sums, the steps and every slice of
    the breakdown, compared as the bytes they pickle to."""
    import pickle

    from hlo_doctor.hosts.work import HostPart, HostTask, read_one
    (path, *_) = find_xplanes(SAMPLES / capture)
    beside, after = (read_one(HostTask(str(path), overlap=o)) for o in (True, False))
    assert isinstance(beside, HostPart) and isinstance(after, HostPart) and beside.totals is not None
    assert beside.totals.breakdown
    assert pickle.dumps(beside.totals) == pickle.dumps(after.totals)


@pytest.mark.parametrize("capture", ["tpu_v5e_original", "gpu_h200_original", "engine_b64_original_a"])
def test_the_devices_index_is_the_numpy_passes(capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each event's device (``_xsums.device_index``) against the numpy passes it replaces: a real
    host's events, those events with their hosts and devices drawn at random, and a code of -1 (a
    hostile file's) left to numpy."""
    from hlo_doctor.opstats import step_spans

    ops = _trace(capture).ops
    rng = np.random.default_rng(len(ops))
    drawn = dataclasses.replace(
        ops, host=Coded(rng.integers(0, 3, len(ops)).astype(np.int16), ["a", "b", "c"]),
        device=Coded(rng.integers(0, 5, len(ops)).astype(np.int32), [f"/device:{k}" for k in range(5)]))
    hostile = dataclasses.replace(ops, device=Coded(np.full(len(ops), -1, np.int16), ops.device.categories))
    for events in (ops, drawn):
        got = step_spans.device_index(events)
        with monkeypatch.context() as m:
            m.setattr(step_spans, "_xsums", None)
            want = step_spans.device_index(events)
        assert got[1] == want[1] and len(got[1]) > (events is drawn) * 10
        for a, b in ((got[0], want[0]), (got[2], want[2])):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    with pytest.raises(ValueError):  # numpy's bincount of a negative key, as before
        step_spans.device_index(hostile)
