"""The compiled walk of a driver thread's events (``_xsegments.segments``) against the Python walk.

The judge is ``host_segments``'s own loop (the heap merge of the thread's events with the compiles,
a stack of open events, each label from its parent's and its name), run on the same input with the
compiled reader turned off: the same segments, to the bit, and the same labels in the same order.
Inputs: random nested events (ties, zero lengths, children that outlive their parents, compiles that
start with an event) over the names a thread holds, and the driver threads of real captures.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from hlo_doctor.opstats import host_time
from hlo_doctor.opstats.host_time import FrameKinds, host_segments
from hlo_doctor.trace import cwire
from hlo_doctor.trace.compiles import Compile
from hlo_doctor.trace.host_threads import read_host_threads
from hlo_doctor.trace.python_frames import DriverThread
from hlo_doctor.trace.read import find_xplanes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
NAMES = ("$runner.py:135 _sample_from_logits", "$array_methods.py:116 _astype", "PjitFunction(sample)",
         "PjitFunction(decode_forward)", "$api.py:2 block_until_ready", "ExecuteHelper",
         "backend_compile", "$threading.py:10 wait", "$main.py:3 loop")

pytestmark = pytest.mark.skipif(not cwire.SEGMENTS_COMPILED, reason="the compiled walk is not built in this install")


def _both(thread: DriverThread | None, compiles: list[Compile], waits: bool,
          monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = FrameKinds.empty()
    got = host_segments(thread, kinds, compiles, execution_waits=waits)
    with monkeypatch.context() as m:
        m.setattr(host_time, "SEGMENTS_COMPILED", False)
        want = host_segments(thread, kinds, compiles, execution_waits=waits)
    assert got.labels == want.labels
    for a, b in ((got.start_ns, want.start_ns), (got.end_ns, want.end_ns), (got.label, want.label)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _random_thread(rng: random.Random, n: int) -> DriverThread:
    starts, ends = [], []
    t = 0.0
    for _ in range(n):
        t += rng.choice((0.0, 0.5, 1.0, 7.25))
        starts.append(t)
        ends.append(t + rng.choice((0.0, 1.0, 3.0, 40.0, 500.0)))
    s, e = np.asarray(starts), np.asarray(ends)
    codes = np.asarray([rng.randrange(len(NAMES)) for _ in range(n)], np.int32)
    order = np.lexsort((-e, s))
    return DriverThread("h", "/host:CPU", "python", s[order], e[order], codes[order], NAMES, 0, 0)


@pytest.mark.parametrize("seed", range(8))
def test_random_nested_events_walk_alike(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    thread = _random_thread(rng, rng.choice((0, 1, 5, 300, 3000)))
    compiles = sorted((Compile(start_us=rng.choice((0.0, 0.0075, 1.0)) * rng.randrange(50), duration_us=rng.random(),
                               backend_us=0.0, module=rng.choice(("jit_a", "jit_b", "")), program_id=None,
                               function="", frames=(), step=-1, events=()) for _ in range(rng.randrange(4))),
                      key=lambda c: c.start_us)
    _both(thread if len(thread) or seed % 2 else None, compiles, bool(seed % 3), monkeypatch)


@pytest.mark.parametrize("capture", ["engine_b64_original_a", "gpu_h200_original", "gpu_h200_seed_b512"])
def test_real_driver_threads_walk_alike(capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = read_host_threads([find_xplanes(SAMPLES / capture)[0]])
    assert threads
    for ts in threads.values():
        for t in ts:
            _both(t, [], capture.startswith("engine"), monkeypatch)
