"""One diagnosis reads a capture's op events once: the host-time estimates (``lint.trace_capture``)
keep the op intervals of the op-stats stage's read instead of reading the files again.

Judge: the intervals kept equal those of a fresh, separate read of the same files (every array of
every host), and the file's events are decoded once (``read_trace`` counted)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import hlo_doctor.trace.read as trace_read
from hlo_doctor.lint import diagnose, load_context, load_rulebook
from hlo_doctor.lint import trace_capture as tc
from hlo_doctor.trace import find_xplanes

ENGINE = Path(__file__).resolve().parents[2] / "sample_traces" / "engine_b64_original_a"


def test_a_diagnosis_reads_the_op_events_once_and_keeps_the_same_intervals(monkeypatch: pytest.MonkeyPatch) -> None:
    tc._read.cache_clear()
    tc._PRIMED.clear()
    calls: list[list[Path]] = []
    real = trace_read.read_trace

    def counted(paths: list[Path]):  # type: ignore[no-untyped-def]
        calls.append(list(paths))
        return real(paths)

    monkeypatch.setattr(trace_read, "read_trace", counted)
    monkeypatch.setattr(tc, "read_trace", counted)
    import hlo_doctor.opstats.io as io
    monkeypatch.setattr(io, "read_trace", counted)
    ctx = replace(load_context(ENGINE), what_if=False)
    diagnose(ctx, load_rulebook())
    kept = tc.trace_capture(ctx)
    assert kept is not None and len(calls) == 1
    # A fresh read of the same files gives the same intervals, host by host.
    fresh = tc._intervals(real(find_xplanes(ENGINE)))
    assert kept.ops.keys() == fresh.keys() and kept.ops
    for host, arrays in fresh.items():
        for got, want in zip(kept.ops[host], arrays, strict=True):
            assert np.array_equal(got, want)
    # Without the op-stats stage's read (the cache empty), the estimates read the files themselves.
    tc._read.cache_clear()
    tc._PRIMED.clear()
    again = tc.trace_capture(ctx)
    assert again is not None and len(calls) == 2
    for host, arrays in again.ops.items():
        for got, want in zip(kept.ops[host], arrays, strict=True):
            assert np.array_equal(got, want)


def test_a_large_host_file_read_in_process_keeps_its_intervals_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host file large enough for the hosts' reader (read in this process, its sums beside it):
    its op intervals are kept from that read as well (a driver thread's capture), never read again."""
    import hlo_doctor.hosts.capture as capture
    from hlo_doctor.cli.hosts import pod_options

    tc._read.cache_clear()
    tc._PRIMED.clear()
    calls: list[list[Path]] = []
    real = trace_read.read_trace

    def counted(paths: list[Path]):  # type: ignore[no-untyped-def]
        calls.append(list(paths))
        return real(paths)

    monkeypatch.setattr(tc, "read_trace", counted)
    monkeypatch.setattr(capture, "WORKER_MIN_BYTES", 0)
    # (the reader diagnose's command hands it: hosts read as a pod's, here one host in this process)
    ctx = replace(load_context(ENGINE, reader=capture.CaptureReader(pod_options(None, None, False))), what_if=False)
    diagnose(ctx, load_rulebook())
    kept = tc.trace_capture(ctx)
    assert kept is not None and not calls
    fresh = tc._intervals(real(find_xplanes(ENGINE)))
    assert kept.ops.keys() == fresh.keys() and kept.ops
    for host, arrays in fresh.items():
        for got, want in zip(kept.ops[host], arrays, strict=True):
            assert np.array_equal(got, want)
