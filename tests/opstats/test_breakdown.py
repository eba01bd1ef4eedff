"""The step breakdown: device busy (union of op intervals), idle, and what the host ran meanwhile.

Judged by xprof on device traces: its overview page's device idle time (TPU traces built the way
libtpu writes them, one and four chips) and, on the real H200 capture (where the GPU overview shows
no device idle figure), the device ``IDLE`` row of its framework_op_stats, the same ratio; xprof
converts a copy of each file. The host side is judged on a trace whose Python frames and dispatch
spans are placed by hand, so every microsecond of idle time has a known owner.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))

from xspace_builder import RealModule, SpaceBuilder, TpuCore, compile_module  # noqa: E402

from hlo_doctor.cli import main  # noqa: E402
from hlo_doctor.opstats import from_json, load_opstats, to_json  # noqa: E402
from hlo_doctor.opstats.breakdown_build import _Busy  # noqa: E402
from hlo_doctor.render.breakdown import to_markdown  # noqa: E402
from hlo_doctor.trace import find_xplanes  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
H200 = SAMPLES / "gpu_h200_original"
ENGINE_CPU = SAMPLES / "engine_b64_original_a"
PID = 77
US = 1000.0  # ns


def _layer(x: jnp.ndarray, w: jnp.ndarray) -> jnp.ndarray:
    return jnp.tanh(x @ w) + 1.0


@pytest.fixture(scope="module")
def layer() -> RealModule:
    return compile_module(_layer, jnp.ones((8, 32), jnp.float32), jnp.ones((32, 32), jnp.float32))


def _xprof(xplanes: list[Path], tool: str, workdir: Path) -> Any:
    from xprof.convert import raw_to_tool_data

    copies = []
    for p in xplanes:
        copy = workdir / "xprof_copy" / p.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, copy)
        copies.append(str(copy))
    data, _ = raw_to_tool_data.xspace_to_tool_data(copies, tool, {})
    return json.loads(data)


def _xprof_device_idle_pct(xplanes: list[Path], workdir: Path) -> float:
    """xprof's overview page: device idle time (TPU)."""
    doc = _xprof(xplanes, "overview_page", workdir)
    value = next(t["p"]["device_idle_time_percent"] for t in doc if "device_idle_time_percent" in t.get("p", {}))
    return float(str(value).rstrip("%"))


# -------------------------------------------------------------------------------------------------
# Busy time: a union of intervals
# -------------------------------------------------------------------------------------------------

def test_busy_is_the_union_of_the_op_intervals() -> None:
    # Two ops overlapping (XLA:CPU threads, GPU streams), one nested, one alone.
    busy = _Busy(np.asarray([0.0, 5.0, 20.0, 21.0]), np.asarray([10.0, 15.0, 25.0, 22.0]))
    assert busy.total == 20.0  # not 10 + 10 + 5 + 1
    assert busy(np.asarray([-1.0, 7.0, 15.0, 18.0, 22.0, 30.0])).tolist() == [0.0, 7.0, 15.0, 15.0, 17.0, 20.0]


# -------------------------------------------------------------------------------------------------
# TPU traces built as libtpu writes them, judged by xprof's overview page
# -------------------------------------------------------------------------------------------------

STEP = 1000 * US


def _host_plane(space: SpaceBuilder, events: list[tuple[str, float, float, dict[str, Any]]]) -> None:
    """A host plane whose Python thread holds ``events`` (name, start ns, duration ns, stats)."""
    plane = space.plane("/host:CPU")
    line = plane.line("python3", 1, 1_000_000)
    for name, start, duration, stats in events:
        plane.event(line, plane.event_metadata(name), start, duration, stats or None)


def _host_bound_capture(root: Path, layer: RealModule, steps: int = 4) -> Path:
    """One TPU chip; per 1000 us step: the host dispatches ``layer`` (10-60 us), the chip runs it
    (50-280 us), the host post-processes in Python (300-900 us)."""
    space = SpaceBuilder()
    space.add_module(layer, PID)
    core = TpuCore(space, 0)
    events: list[tuple[str, float, float, dict[str, Any]]] = []
    for i in range(steps):
        t = i * STEP
        core.run(layer, PID, t + 50 * US, [(layer.ops[0].name, 100 * US), (layer.ops[1].name, 130 * US)], run_id=i,
                 gap_ns=0.0)
        events += [("decode", t, STEP, {"step_num": i}),
                   ("$serve_loop.py:10 serve_step", t + 1 * US, 998 * US, {}),
                   ("PjitFunction(_layer)", t + 10 * US, 50 * US, {}),
                   ("$serve_loop.py:40 postprocess", t + 300 * US, 600 * US, {})]
    _host_plane(space, events)
    return space.write(root)


def test_idle_time_is_split_by_what_the_host_ran(tmp_path: Path, layer: RealModule) -> None:
    b = load_opstats(_host_bound_capture(tmp_path / "run", layer)).breakdown
    assert b is not None and b.step_source == "annotation" and len(b.steps) == 4
    for s in b.steps:
        assert s.wall_us == pytest.approx(1000.0)
        assert s.busy_us == pytest.approx(230.0)
        assert s.idle_us == pytest.approx(770.0)
        # Idle: 1 us before the step's frame opens and 1 us after it closes (untraced), 9 us of
        # serve_step before the dispatch, 40 us of dispatch before the chip starts, 20 us of serve_step
        # after the chip ends, the 600 us post-process, 99 us of serve_step after it.
        assert s.idle_by_kind["dispatch"] == pytest.approx(40.0)
        assert s.idle_by_kind["python"] == pytest.approx(9.0 + 20.0 + 600.0 + 99.0)
        assert s.idle_by_kind["untraced"] == pytest.approx(2.0)
        assert sum(s.host_us.values()) == pytest.approx(s.wall_us)
    lines = {(x.kind, x.where, x.target): x for x in b.lines}
    assert lines[("python", "serve_loop.py:40 postprocess", "")].idle_us == pytest.approx(600.0)
    assert lines[("dispatch", "serve_loop.py:10 serve_step", "jit__layer")].idle_us == pytest.approx(40.0)
    assert lines[("dispatch", "serve_loop.py:10 serve_step", "jit__layer")].host_us == pytest.approx(50.0)
    assert b.lines[0].where == "serve_loop.py:40 postprocess"
    assert b.python_frames and b.dispatch_spans and b.driver_threads == (("host0", "python3"),)


def test_device_idle_matches_xprofs_overview_page(tmp_path: Path, layer: RealModule) -> None:
    xplane = _host_bound_capture(tmp_path / "run", layer)
    b = load_opstats(xplane).breakdown
    assert b is not None
    xprof = _xprof_device_idle_pct([xplane], tmp_path)
    # xprof measures from the chip's first op to its last: 3 idle gaps of 770 us in 3230 us.
    assert xprof == pytest.approx(100 * (1 - 4 * 230 / 3230), abs=0.1)
    assert b.window_idle_pct() == pytest.approx(xprof, abs=3.0)
    # The steps count the host's time before the first run and after the last one too.
    assert b.idle_pct == pytest.approx(77.0, abs=0.01)


def test_four_chips_without_step_marks_match_xprof(tmp_path: Path, layer: RealModule) -> None:
    # Four chips run the program 4 times each with different gaps: steps are executions, per chip.
    space = SpaceBuilder()
    space.add_module(layer, PID)
    for chip, gap in enumerate((400 * US, 100 * US, 0.0, 250 * US)):
        core = TpuCore(space, chip)
        t = 0.0
        for i in range(4):
            t = core.run(layer, PID, t, [(layer.ops[0].name, 100 * US), (layer.ops[1].name, 130 * US)], run_id=i) + gap
    xplane = space.write(tmp_path / "run")
    b = load_opstats(xplane).breakdown
    assert b is not None and b.step_source == "module-executions"
    devices = {d["device"]: d for d in b.per_device()}
    assert len(devices) == 4 and all(d["steps"] == 4 for d in devices.values())
    assert devices["/device:TPU:2"]["idle_pct"] == pytest.approx(0.0, abs=0.01)
    assert devices["/device:TPU:0"]["busy_us"] == pytest.approx(230.0, abs=0.01)
    xprof = _xprof_device_idle_pct([xplane], tmp_path)
    assert b.window_idle_pct() == pytest.approx(xprof, abs=3.0)
    assert b.idle_pct == pytest.approx(xprof, abs=3.0)
    assert any("no Python-tracer frames" in n for n in b.notes)


def test_device_steps_count_in_the_span_as_xprof_counts_them(tmp_path: Path, layer: RealModule) -> None:
    # The Steps line's events reach past the ops (the run starts 200 us into its 1000 us step):
    # xprof's span runs from the first step's start to the last step's end.
    space = SpaceBuilder()
    space.add_module(layer, PID)
    core = TpuCore(space, 0)
    for i in range(3):
        core.run(layer, PID, i * STEP + 200 * US, [(layer.ops[0].name, 300 * US)], run_id=i)
        core.step(i, i * STEP, STEP)
    xplane = space.write(tmp_path / "run")
    b = load_opstats(xplane).breakdown
    assert b is not None and b.step_source == "device-steps"
    assert b.idle_pct == pytest.approx(70.0, abs=0.01)
    assert b.window_idle_pct() == pytest.approx(_xprof_device_idle_pct([xplane], tmp_path), abs=3.0)


# -------------------------------------------------------------------------------------------------
# Real captures
# -------------------------------------------------------------------------------------------------

def test_h200_capture_is_host_bound_and_matches_xprof(tmp_path: Path) -> None:
    stats = load_opstats(H200)
    b = stats.breakdown
    assert b is not None and len(b.steps) == 5 and b.python_frames and b.dispatch_spans
    assert b.wall_us == pytest.approx(stats.step_time_us)
    # 0.18 ms of kernels per 1.9 ms step; the rest is the host.
    assert b.busy_us == pytest.approx(177.8, abs=1.0)
    assert b.idle_pct == pytest.approx(90.6, abs=0.5)
    idle = b.idle_by_kind()
    assert idle["python"] + idle["dispatch"] > 0.8 * b.idle_us
    top = b.lines[0]
    assert (top.kind, top.where, top.target) == ("dispatch", "runner.py:124 execute_decode", "jit_decode_forward")
    assert top.source.endswith("hlo_doctor/engine/runner.py:124")
    astype = next(x for x in b.lines if x.target.endswith("_astype"))
    assert astype.where == "runner.py:135 _sample_from_logits" and astype.idle_us > 100
    # xprof: the device IDLE row of framework_op_stats is the ratio its TPU overview calls device idle.
    rows = _xprof(find_xplanes(H200), "framework_op_stats", tmp_path)
    table = rows[0] if isinstance(rows, list) else rows
    ids = [c["id"] for c in table["cols"]]
    idle_row = next(dict(zip(ids, [c.get("v") if c else None for c in r["c"]], strict=False)) for r in table["rows"]
                    if r["c"][ids.index("host_or_device")]["v"] == "Device"
                    and r["c"][ids.index("type")]["v"] == "IDLE")
    assert b.window_idle_pct() == pytest.approx(100 * idle_row["device_total_self_time_percent"], abs=3.0)
    # Its overview's step-time graph: device compute time per step.
    overview = _xprof(find_xplanes(H200), "overview_page", tmp_path)
    graph = next(t for t in overview if t.get("rows") and "step_time_graph_column_ids" in t.get("p", {}))
    compute = sorted(1000 * float(r["c"][1]["v"]) for r in graph["rows"])
    assert sorted(s.busy_us for s in b.steps) == pytest.approx(compute, rel=0.02)


def test_xla_cpu_engine_is_device_bound() -> None:
    b = load_opstats(ENGINE_CPU).breakdown
    assert b is not None and "XLA:CPU" in b.busy_definition and b.steps[0].device == "/host:CPU"
    assert all(0 < s.busy_us <= s.wall_us for s in b.steps)
    # XLA:CPU's threads run several ops at once: busy (their union) is at most the ops' sum.
    assert all(s.busy_us <= s.op_us + 1e-6 for s in b.steps)
    idle = b.idle_by_kind()
    assert 5.0 < b.idle_pct < 30.0
    # The host waits in block_until_ready; its Python and dispatch fill well under 1% of the step.
    assert max(idle, key=lambda k: idle[k]) == "wait"
    assert (idle["python"] + idle["dispatch"]) / b.wall_us < 0.01


def test_json_export_keeps_the_breakdown() -> None:
    stats = load_opstats(H200)
    back = from_json(to_json(stats))
    assert back.breakdown is not None and stats.breakdown is not None
    assert back.breakdown.steps == stats.breakdown.steps
    assert back.breakdown.lines == stats.breakdown.lines
    assert back.breakdown.idle_pct == pytest.approx(stats.breakdown.idle_pct)


def test_stats_breakdown_view(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["stats", str(H200), "--breakdown", "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "hlo-doctor.breakdown/1" and len(doc["steps"]) == 5
    assert doc["summary"]["idle_pct"] == pytest.approx(90.6, abs=0.5)
    markdown = to_markdown(load_opstats(H200).breakdown, "h200")  # type: ignore[arg-type]
    assert "| runner.py:124 execute_decode | jit_decode_forward |" in markdown
    result = runner.invoke(main, ["stats", str(H200), "--breakdown", "--format", "csv"], catch_exceptions=False)
    assert result.exit_code == 0 and len(result.stdout.strip().splitlines()) == 6
    # An export written before the breakdown existed: one line, exit 2.
    doc = json.loads(to_json(load_opstats(H200)))
    doc.pop("breakdown")
    old = tmp_path / "opstats.json"
    old.write_text(json.dumps(doc))
    result = runner.invoke(main, ["stats", str(old), "--breakdown"])
    assert result.exit_code == 2 and "no step breakdown" in result.output
