"""The step breakdown of a host where two Python threads dispatch programs.

A real capture (``hlo-doctor``'s own, jax.jit on CPU): a server thread runs ``encode`` twice and a
detokenizer thread runs ``detok`` three times per step, both long-lived and fed by queues, while the
stepping thread only hands them work and waits. The detokenizer dispatches the most: it is the
driver thread; the server thread is read apart, with its own host time and lines.
"""

from __future__ import annotations

import queue
import threading

import jax
import jax.numpy as jnp
import pytest

from hlo_doctor.capture import capture_run
from hlo_doctor.opstats import OpStats
from hlo_doctor.opstats.breakdown import HOST_KINDS, breakdown_from_dict


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
def two_threads(tmp_path_factory: pytest.TempPathFactory) -> OpStats:
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
        _, stats = capture_run(step, steps=3, warmup=1, out_dir=tmp_path_factory.mktemp("threads") / "run",
                               target="two_threads")
    finally:
        for inbox, _ in boxes:
            inbox.put(None)
        for w in workers:
            w.join(timeout=30)
    return stats


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
