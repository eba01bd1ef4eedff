"""The step breakdown of a host where two Python threads dispatch programs.

A real capture (``hlo-doctor``'s own, jax.jit on CPU): a server thread runs ``encode`` twice and a
detokenizer thread runs ``detok`` three times per step, both long-lived and fed by queues, while the
stepping thread only hands them work and waits. The detokenizer dispatches the most: it is the
driver thread; the server thread is read apart, with its own host time and lines.

The same capture exported by xprof's converter (``trace_viewer``, as people share it) must give the
same host side as its xplane: per step and kind, per thread, line for line. That export is also the
judge of the threads' rows: each thread's dispatch spans, and its time per step by kind, summed from
its own raw events (the step annotations, the op events and the thread's events, swept instant by
instant) equal what the breakdown and its views say.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import queue
import sys
import threading
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))

from test_trace_json import xprof_trace_json  # noqa: E402

from hlo_doctor.capture import capture_run  # noqa: E402
from hlo_doctor.cli.breakdown_view import _csv  # noqa: E402
from hlo_doctor.cli.common import plain_text  # noqa: E402
from hlo_doctor.core.format import fmt_us  # noqa: E402
from hlo_doctor.opstats import OpStats, load_opstats  # noqa: E402
from hlo_doctor.opstats.breakdown import HOST_KINDS, HostLine, StepBreakdown, breakdown_from_dict  # noqa: E402
from hlo_doctor.render.breakdown import to_markdown, to_terminal  # noqa: E402
from hlo_doctor.render.breakdown_threads import threads_line  # noqa: E402
from hlo_doctor.render.html.model import Note, Table  # noqa: E402
from hlo_doctor.render.html.step_threads import thread_items  # noqa: E402
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
    # Said in the header line; the figures are the threads' rows, not a note.
    assert threads_line(b).startswith("vm: 2 threads dispatch programs and run at the same time")
    assert not any("threads dispatch programs" in n for n in b.notes)


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


# -- the judge: the thread's raw events in xprof's export ----------------------------------------------


def _kind(open_events: list[tuple[float, float, str]]) -> str:
    """What a thread was in while these events (outermost first) were open: the breakdown's rules,
    read off the open calls at one instant."""
    if not open_events:
        return "untraced"
    kind = "python"
    for _, _, name in open_events:
        if kind in ("wait", "compile"):
            break
        if name.startswith("PjitFunction("):
            kind = "dispatch"
        elif "ExecuteHelper" in name and kind == "dispatch":
            kind = "wait"  # XLA:CPU runs the program while the dispatching thread waits
        elif name.startswith("$") and kind != "dispatch":
            kind = "wait" if name.split(" ", 1)[1] == "block_until_ready" else "python"
    return kind


def _raw_sums(trace: Path) -> dict[int, tuple[int, dict[str, float], dict[str, float]]]:
    """tid -> (dispatch spans, host us per step by kind, device idle us per step by kind) of every
    thread with a dispatch span, from xprof's trace_viewer events alone."""
    events = [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if "step_num" in (e.get("args") or {}))
    ops = [(e["ts"], e["ts"] + e["dur"]) for e in events if "hlo_op" in (e.get("args") or {})]
    per: dict[int, list[tuple[float, float, str]]] = {}
    for e in events:
        name = str(e["name"])
        head = name[1:].split(" ", 1)[0]
        python_file = name.startswith("$") and head.rpartition(":")[2].isdigit() and not head.startswith("<")
        if python_file or name.startswith("PjitFunction(") or "ExecuteHelper" in name:
            per.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"], name))
    out = {}
    for tid, evs in per.items():
        assert not any("ompil" in n for _, _, n in evs)  # a warm capture: no compile to classify
        dispatches = sum(n.startswith("PjitFunction(") for _, _, n in evs)
        if not dispatches:
            continue
        evs.sort(key=lambda ev: (ev[0], -ev[1]))
        cuts = sorted({t for s, e, _ in evs for t in (s, e)} | {t for s, e in steps for t in (s, e)}
                      | {t for s, e in ops for t in (s, e)})
        host, idle = dict.fromkeys(HOST_KINDS, 0.0), dict.fromkeys(HOST_KINDS, 0.0)
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            mid = (lo + hi) / 2
            if not any(a <= mid < b for a, b in steps):
                continue
            kind = _kind([ev for ev in evs if ev[0] <= mid < ev[1]])
            host[kind] += hi - lo
            if not any(a <= mid < b for a, b in ops):
                idle[kind] += hi - lo
        out[tid] = (dispatches, {k: v / len(steps) for k, v in host.items()},
                    {k: v / len(steps) for k, v in idle.items()})
    return out


def _csv_blocks(text: str) -> list[list[dict[str, str]]]:
    return [list(csv.DictReader(io.StringIO(block))) for block in text.strip("\n").split("\n\n")]


def test_each_threads_row_is_what_its_raw_events_sum_to(captured: tuple[Path, OpStats], tmp_path: Path) -> None:
    run, stats = captured
    b = stats.breakdown
    assert b is not None
    raw = _raw_sums(xprof_trace_json(find_xplanes(run)[0], tmp_path))
    # xprof writes a line's id as a 32-bit thread id: its low 32 bits.
    ids = {int(t.thread.rsplit(" ", 1)[1]) & 0xFFFFFFFF: t for t in b.threads}
    assert set(ids) == set(raw) and len(raw) == 2
    for tid, (dispatches, host, idle) in raw.items():
        t = ids[tid]
        assert t.dispatches == dispatches
        assert t.host_by_kind_us == pytest.approx(host, rel=1e-6, abs=1e-3)
        assert t.idle_by_kind_us == pytest.approx(idle, rel=1e-6, abs=1e-3)
    # 3 steps: the detokenizer dispatched 9 calls, the server 6 (jax writes two nested spans a call).
    assert sorted(d for d, _, _ in raw.values()) == [12, 18]
    # The CSV's threads block says the same, to its 3 decimals.
    steps, threads, lines = _csv_blocks(_csv(b))
    assert len(steps) == 3 and [r["role"] for r in threads] == ["driver", "apart"]
    for r in threads:
        dispatches, host, idle = raw[int(r["thread"].rsplit(" ", 1)[1]) & 0xFFFFFFFF]
        assert int(r["dispatch_spans"]) == dispatches
        for k in HOST_KINDS:
            assert float(r[f"host_{k}_us"]) == pytest.approx(host[k], abs=1e-3)
            assert float(r[f"idle_{k}_us"]) == pytest.approx(idle[k], abs=1e-3)
    server = b.threads[1]
    assert {r["thread"] for r in lines} == {server.thread}
    assert [float(r["idle_us"]) for r in lines] == pytest.approx([x.idle_us for x in server.lines], abs=1e-3)


def test_every_view_has_the_threads_rows_and_says_they_run_at_once(two_threads: OpStats) -> None:
    b = two_threads.breakdown
    assert b is not None
    driver, server = b.threads
    text, md = plain_text(to_terminal(b, "run")), to_markdown(b, "run")
    for view in (text, md):
        assert threads_line(b) in view
        table_rows = [line for line in view.splitlines() if line[:1] in "|│"]
        for t in b.threads:
            cells = [t.thread, str(t.dispatches), *(fmt_us(t.host_by_kind_us[k]) for k in HOST_KINDS),
                     *(fmt_us(t.idle_by_kind_us[k]) for k in HOST_KINDS)]
            row = next(line for line in table_rows if t.thread in line)
            assert all(c in row for c in cells), (row, cells)
        # The other thread's lines, most idle first, each naming it.
        rows = [line for line in table_rows if server.thread in line][1:]
        assert len(rows) == len(server.lines) > 1
        assert all(fmt_us(x.idle_us) in r for x, r in zip(server.lines, rows, strict=True))
        assert [x.idle_us for x in server.lines] == sorted((x.idle_us for x in server.lines), reverse=True)
    # The step rows are the driver's alone: its wait per step is not the two threads' sum.
    assert b.host_by_kind()["wait"] == pytest.approx(driver.host_by_kind_us["wait"])
    # The page: a line with no figure, and every figure of the threads in a table.
    items = thread_items(b.to_dict())
    note, threads, lines = items
    assert isinstance(note, Note) and not any(ch.isdigit() for ch in note.text)
    assert isinstance(threads, Table) and isinstance(lines, Table)
    assert [[c.value for c in r[4:]] for r in threads.rows] == [
        [t.dispatches, *(t.host_by_kind_us[k] for k in HOST_KINDS), *(t.idle_by_kind_us[k] for k in HOST_KINDS)]
        for t in b.threads]
    assert [(r[0].value, r[1].value) for r in lines.rows] == [(server.thread, x.idle_us) for x in server.lines]


def test_one_dispatching_thread_shows_no_threads_rows(two_threads: OpStats) -> None:
    b = two_threads.breakdown
    assert b is not None
    one = replace(b, threads=b.threads[:1])
    assert threads_line(one) == "" and thread_items(one.to_dict()) == []
    assert "\n\n" not in _csv(one).strip("\n") and "dispatch programs" not in to_markdown(one)
    assert "threads that dispatch" not in plain_text(to_terminal(one))


def test_threads_of_two_hosts_are_named_with_their_host(two_threads: OpStats) -> None:
    b = two_threads.breakdown
    assert b is not None
    # The capture's threads again as a second host's (a pod's hosts each run the same server).
    two = replace(b, threads=(*b.threads, *(replace(t, host="h2") for t in b.threads)))
    line = threads_line(two)
    assert line.startswith("vm: 2 threads") and " · h2: 2 threads" in line
    md = to_markdown(two)
    server = b.threads[1]
    assert sum(f"| vm {server.thread} |" in x for x in md.splitlines()) == len(server.lines)
    assert sum(f"| h2 {server.thread} |" in x for x in md.splitlines()) == len(server.lines)
    _, threads, lines = _csv_blocks(_csv(two))
    assert [(r["host"], r["role"]) for r in threads] == [("vm", "driver"), ("vm", "apart"), ("h2", "driver"),
                                                          ("h2", "apart")]
    assert sorted({r["host"] for r in lines}) == ["h2", "vm"] and len(lines) == 2 * len(server.lines)
