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


def _counted_reads(monkeypatch: pytest.MonkeyPatch, *modules: object) -> list[list[Path]]:
    """The files of each ``read_trace`` call made through these modules' names of it, from now on
    (the cache of capture reads emptied first)."""
    tc._read.cache_clear()
    tc._PRIMED.clear()
    calls: list[list[Path]] = []
    real = trace_read.read_trace

    def counted(paths: list[Path]):  # type: ignore[no-untyped-def]
        calls.append(list(paths))
        return real(paths)

    for module in modules:
        monkeypatch.setattr(module, "read_trace", counted)
    return calls


def _same_as_a_fresh_read(kept: tc.TraceCapture) -> None:
    """The intervals kept equal those of a fresh read of the same files, host by host."""
    fresh = tc._intervals(trace_read.read_trace(find_xplanes(ENGINE)))
    assert kept.ops.keys() == fresh.keys() and kept.ops
    for host, arrays in fresh.items():
        for got, want in zip(kept.ops[host], arrays, strict=True):
            assert np.array_equal(got, want)


def test_a_diagnosis_reads_the_op_events_once_and_keeps_the_same_intervals(monkeypatch: pytest.MonkeyPatch) -> None:
    import hlo_doctor.opstats.io as io

    real = trace_read.read_trace
    calls = _counted_reads(monkeypatch, trace_read, tc, io)
    ctx = replace(load_context(ENGINE), what_if=False)
    diagnose(ctx, load_rulebook())
    kept = tc.trace_capture(ctx)
    assert kept is not None and len(calls) == 1
    monkeypatch.setattr(trace_read, "read_trace", real)
    _same_as_a_fresh_read(kept)
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

    calls = _counted_reads(monkeypatch, tc)
    monkeypatch.setattr(capture, "WORKER_MIN_BYTES", 0)
    # (the reader diagnose's command hands it: hosts read as a pod's, here one host in this process)
    ctx = replace(load_context(ENGINE, reader=capture.CaptureReader(pod_options(None, None, False))), what_if=False)
    diagnose(ctx, load_rulebook())
    kept = tc.trace_capture(ctx)
    assert kept is not None and not calls
    _same_as_a_fresh_read(kept)
