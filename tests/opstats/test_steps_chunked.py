"""Step labels of events set a chunk of events at a time are those of one lookup over all of them.

The judge is numpy's own ``searchsorted`` of every event against the marks at once (no chunking),
on more events than one chunk holds: a device's events in one run (the plane-at-a-time read) and two
hosts' events interleaved (the other path), with events before, between and after the marks.
"""

from __future__ import annotations

import numpy as np
import pytest

from hlo_doctor.opstats import steps
from hlo_doctor.opstats.steps import steps_from_marks
from hlo_doctor.trace import OpEvents, StepMark
from hlo_doctor.trace.model import Coded


def _reference(marks: list[StepMark], hosts: np.ndarray, starts: np.ndarray) -> np.ndarray:
    out = np.full(len(starts), -1, np.int64)
    for host in sorted({m.host for m in marks}):
        group = sorted((m for m in marks if m.host == host), key=lambda m: m.start_ns)
        b = np.asarray([m.start_ns for m in group])
        e = b + np.asarray([m.duration_ns for m in group])
        labels = np.asarray([m.step_num for m in group])
        on = np.flatnonzero(hosts == host)
        idx = np.searchsorted(b, starts[on], side="right") - 1
        inside = (idx >= 0) & (starts[on] <= e[np.maximum(idx, 0)])
        out[on[inside]] = labels[idx[inside]]
    return out


@pytest.mark.parametrize("interleaved", [False, True])
def test_labels_equal_one_lookup_of_every_event(interleaved: bool) -> None:
    rng = np.random.default_rng(7)
    n = 3 * steps._CHUNK + 12_345
    hosts = np.where(np.arange(n) % 2 == 0, "h0", "h1") if interleaved else np.full(n, "h0")
    starts = np.sort(rng.uniform(0, 1e9, n))
    # Steps of 4 ms every 5 ms from 1 ms on: events fall before, inside, between and after them.
    marks = [StepMark(host, "decode", k, 1e6 + k * 5e6, 4e6) for host in ("h0", "h1") for k in range(150)]
    zeros = np.zeros(n, np.int8)
    ops = OpEvents(host=Coded((hosts == "h1").astype(np.int8), ["h0", "h1"]), device=Coded(zeros, [""]),
                   module=Coded(zeros, ["m"]), program_id=Coded(zeros, [1]), op=Coded(zeros, ["op"]),
                   start_ns=starts, duration_ns=np.ones(n), self_ns=np.ones(n), run_id=zeros, occurrences=zeros + 1)
    step_of, times, count = steps_from_marks(marks, ops, by_device=False)
    want = _reference(marks, hosts, starts)
    assert (want >= 0).sum() > steps._CHUNK and (want == -1).sum() > 0
    np.testing.assert_array_equal(step_of, want)
    assert count == 150 and len(times) == 300
