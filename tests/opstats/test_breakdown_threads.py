"""The step breakdown of a host where two Python threads dispatch programs.

A real capture (``hlo-doctor``'s own, jax.jit on CPU): a server thread runs ``encode`` twice and a
detokenizer thread runs ``detok`` three times per step, both long-lived and fed by queues, while the
stepping thread only hands them work and waits. The detokenizer dispatches the most: it is the
driver thread; the server thread is read apart, with its own host time and lines.

The same capture exported by xprof's converter (``trace_viewer``, as people share it) must give the
same host side as its xplane: per step and kind, per thread, line for line.
"""

from __future__ import annotations

import gzip
import json
import queue
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))

from test_trace_json import xprof_trace_json  # noqa: E402

from hlo_doctor.capture import capture_run  # noqa: E402
from hlo_doctor.opstats import OpStats, load_opstats  # noqa: E402
from hlo_doctor.opstats.breakdown import HOST_KINDS, HostLine, StepBreakdown, breakdown_from_dict  # noqa: E402
from hlo_doctor.trace import find_xplanes  # noqa: E402


@jax.jit
def _encode(x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ x) + 1.0


@jax.jit
def _detok(x: jax.Array) -> jax.Array:
    return jnp.argmax(x, axis=-1)


def _worker(fn: object, x: jax.Array, inbox: queue.Queue[int | None], done: queue.Queue[int]) -> None:
    while (n := inbox.get()) is not None:
        for _ in range(n):
            jax.block_until_ready(fn(x))  # type: ignore[operator]
        done.put(n)


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, OpStats]:
    x = jnp.ones((64, 64), jnp.float32)
    boxes: list[tuple[queue.Queue[int | None], queue.Queue[int]]] = [(queue.Queue(), queue.Queue()) for _ in range(2)]
    workers = [threading.Thread(target=_worker, args=(fn, x, *box), name=name, daemon=True)
               for fn, box, name in zip((_encode, _detok), boxes, ("server", "detok"), strict=True)]
    for w in workers:
        w.start()

    def step() -> None:
        boxes[0][0].put(2)
        boxes[1][0].put(3)
        boxes[0][1].get()
        boxes[1][1].get()

    try:
        run, stats = capture_run(step, steps=3, warmup=1, out_dir=tmp_path_factory.mktemp("threads") / "run",
                                 target="two_threads")
    finally:
        for inbox, _ in boxes:
            inbox.put(None)
        for w in workers:
            w.join(timeout=30)
    return run, stats


@pytest.fixture(scope="module")
def two_threads(captured: tuple[Path, OpStats]) -> OpStats:
    return captured[1]


def test_each_dispatching_thread_has_its_own_host_time(two_threads: OpStats) -> None:
    b = two_threads.breakdown
    assert b is not None
    # The stepping thread dispatches nothing: only the two workers, the detokenizer (more
    # dispatches) first.
    assert [t.driver for t in b.threads] == [True, False]
    driver, server = b.threads
    assert driver.host == server.host and driver.thread != server.thread
    assert driver.dispatches > server.dispatches > 0
    # Each thread's time covers its host's device steps once (untraced fills what no event covers).
    for t in b.threads:
        assert set(t.host_by_kind_us) == set(HOST_KINDS)
        assert sum(t.host_by_kind_us.values()) == pytest.approx(b.wall_us, rel=1e-6)
        assert sum(t.idle_by_kind_us.values()) == pytest.approx(b.idle_us, rel=1e-6)
        assert t.host_by_kind_us["dispatch"] > 0 and t.host_by_kind_us["wait"] > 0
    # The step rows are the driver thread's; the server's dispatches are its own lines, apart.
    assert b.host_by_kind() == pytest.approx(driver.host_by_kind_us)
    assert {x.target for x in b.lines if x.kind == "dispatch"} == {"jit__detok"}
    assert driver.lines == ()
    assert {x.target for x in server.lines if x.kind == "dispatch"} == {"jit__encode"}
    assert any("2 threads dispatch programs" in n for n in b.notes)


def test_threads_survive_the_json(two_threads: OpStats) -> None:
    b = two_threads.breakdown
    assert b is not None
    back = breakdown_from_dict(b.to_dict())
    assert back.threads == b.threads


def _assert_same_host_side(got: StepBreakdown, want: StepBreakdown) -> None:
    """Everything the host side says, equal to float rounding; thread names aside (xprof writes
    32-bit thread ids)."""
    def lines(b: tuple[HostLine, ...]) -> dict[tuple[str, str, str, str], float]:
        return {(x.kind, x.where, x.target, what): us for x in b
                for what, us in (("idle", x.idle_us), ("host", x.host_us))}

    assert lines(got.lines) == pytest.approx(lines(want.lines), rel=1e-9, abs=1e-6)
    assert [(t.entry, t.driver, t.dispatches, t.frames) for t in got.threads] == \
        [(t.entry, t.driver, t.dispatches, t.frames) for t in want.threads]
    for g, w in zip(got.threads, want.threads, strict=True):
        assert g.host_by_kind_us == pytest.approx(w.host_by_kind_us, rel=1e-9, abs=1e-6)
        assert g.idle_by_kind_us == pytest.approx(w.idle_by_kind_us, rel=1e-9, abs=1e-6)
        assert lines(g.lines) == pytest.approx(lines(w.lines), rel=1e-9, abs=1e-6)


def test_trace_json_gives_the_xplanes_host_side(captured: tuple[Path, OpStats], tmp_path: Path) -> None:
    run, stats = captured
    xplane = stats.breakdown
    trace = xprof_trace_json(find_xplanes(run)[0], tmp_path)
    got = load_opstats(trace).breakdown
    assert xplane is not None and got is not None
    for name in ("wall_us", "busy_us", "host_us", "idle_by_kind"):
        np.testing.assert_allclose(got.table.column(name), xplane.table.column(name), rtol=1e-9, atol=1e-6)
    assert got.host_by_kind()["dispatch"] > 0 and got.python_frames and got.dispatch_spans
    assert len(got.threads) == 2
    _assert_same_host_side(got, xplane)
    assert not any("no host thread events" in n for n in got.notes)


def test_trace_json_without_host_events_says_so(captured: tuple[Path, OpStats], tmp_path: Path) -> None:
    # The same export with the Python threads' events taken out: only XLA:CPU's threads are left.
    trace = xprof_trace_json(find_xplanes(captured[0])[0], tmp_path)
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    python = {(e["pid"], e["tid"]) for e in doc["traceEvents"]
              if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"]["name"] == "python"}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if (e.get("pid"), e.get("tid")) not in python]
    bare = tmp_path / "bare.trace.json.gz"
    bare.write_bytes(gzip.compress(json.dumps(doc).encode()))
    b = load_opstats(bare).breakdown
    assert b is not None and b.threads == () and not b.python_frames
    assert any("holds no host thread events" in n for n in b.notes)
    assert b.host_by_kind()["untraced"] == pytest.approx(b.wall_us)
