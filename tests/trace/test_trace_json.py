"""Trace-viewer / Perfetto JSON input, judged against the xplane of the same capture.

The JSON files are the ones people share: xprof's ``trace_viewer`` export of an xplane (converted
here, from a copy: xprof writes cache files beside its input), jax's own ``<host>.trace.json.gz``
(a real H200 capture) and ``perfetto_trace.json.gz`` (a fresh XLA:CPU capture). Each table read
from the JSON must equal the one read from the xplane row for row: module, program id (where the
JSON carries one), op, occurrences, total time (within float rounding), devices; and the steps.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner, Result
from xspace_builder import RealModule, SpaceBuilder, TpuCore, compile_module

from hlo_doctor.cli import main
from hlo_doctor.opstats import OpStats, load_opstats
from hlo_doctor.trace import find_xplanes
from hlo_doctor.trace.trace_json import is_trace_json

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "sample_traces" / "engine_b64_original_a"
H200 = REPO / "sample_traces" / "gpu_h200_original"
H200_SEED = REPO / "sample_traces" / "gpu_h200_seed_b512"
BIG_ID = 12190760917235803885  # a libtpu program id above 2**63

Rows = dict[tuple[str, Any, str], tuple[int, float, int, str]]


def xprof_trace_json(xplane: Path, out_dir: Path) -> Path:
    """xprof's trace viewer JSON of ``xplane`` (converted from a copy), gzipped as people share it."""
    from xprof.convert import raw_to_tool_data

    copy = out_dir / "xprof_copy" / xplane.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(xplane, copy)
    # "trace_viewer" is the full JSON; "trace_viewer@" streams events without their args.
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "trace_viewer", {})
    assert data and '"traceEvents"' in data[:200]
    out = out_dir / (xplane.name.removesuffix(".xplane.pb") + ".trace.json.gz")
    out.write_bytes(gzip.compress(data.encode()))
    return out


def rows(stats: OpStats, *, with_program_id: bool = True) -> Rows:
    out: Rows = {}
    for r in stats.table.to_dict(orient="records"):
        pid = r["program_id"] if with_program_id else None
        key = (str(r["module"]), None if pid is None else int(pid), str(r["op"]))
        assert key not in out, f"two rows for {key}"
        out[key] = (int(r["occurrences"]), float(r["total_time_us"]), int(r["devices"]), str(r["shape"]))
    return out


def assert_same_table(xplane: OpStats, from_json: OpStats, *, program_ids: bool = True,
                      shapes: bool = False) -> None:
    """The judge: the JSON's table equals the xplane's row for row, and so do the steps."""
    expected, got = rows(xplane, with_program_id=program_ids), rows(from_json, with_program_id=program_ids)
    assert expected and set(got) == set(expected), (sorted(set(expected) - set(got), key=str)[:5],
                                                     sorted(set(got) - set(expected), key=str)[:5])
    for key, (occ, total, devices, shape) in expected.items():
        g = got[key]
        # JSON times are microseconds printed to the nanosecond: a rounding per event at most.
        assert g[0] == occ and g[2] == devices, (key, g, expected[key])
        assert g[1] == pytest.approx(total, rel=1e-9, abs=1e-3 * occ), (key, g[1], total)
        if shapes:
            assert g[3] == shape, (key, g[3], shape)
    assert (from_json.step_source, from_json.num_steps) == (xplane.step_source, xplane.num_steps)
    assert list(from_json.step_times_us) == pytest.approx(list(xplane.step_times_us), abs=1e-3)
    assert from_json.backend == xplane.backend and from_json.num_devices == xplane.num_devices


def _run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": ""}, catch_exceptions=False)


# -- the judge on real captures -------------------------------------------------------------------

def test_xla_cpu_capture_from_xprof_trace_viewer(tmp_path: Path) -> None:
    xplane = find_xplanes(ENGINE)[0]
    expected = load_opstats(ENGINE)
    got = load_opstats(xprof_trace_json(xplane, tmp_path))
    # The converter drops program ids, and an XLA:CPU trace has no XLA Modules line to recover them:
    # rows are keyed by module and op (each module of this capture ran under one id).
    assert len({(m, p) for m, p, _ in rows(expected)}) == len({m for m, _, _ in rows(expected)})
    assert_same_table(expected, got, program_ids=False)
    assert set(got.table["program_id"]) == {None}
    assert any("without a program id" in w for w in got.warnings)
    assert got.step_source == "annotation" and got.num_steps == 3


def test_gpu_capture_from_xprof_trace_viewer(tmp_path: Path) -> None:
    # H200 (CUPTI): kernels and memcpys carry hlo_op/hlo_module; program ids come from the XLA
    # Modules lines xprof derives per stream (a memcpy after the last kernel included).
    xplane = find_xplanes(H200)[0]
    got = load_opstats(xprof_trace_json(xplane, tmp_path))
    assert_same_table(load_opstats(H200), got)
    assert None not in set(got.table["program_id"]) and got.backend == "gpu"
    assert not any("program id" in w for w in got.warnings)


def test_jax_own_trace_json_of_a_gpu_capture() -> None:
    # jax writes <host>.trace.json.gz beside the xplane at capture time: no derived lines, so no
    # program ids; the rest of the table is the xplane's.
    jax_file = next(H200_SEED.glob("plugins/profile/*/*.trace.json.gz"))
    got = load_opstats(jax_file)
    assert_same_table(load_opstats(find_xplanes(H200_SEED)[0]), got, program_ids=False)
    assert len(got.table) == 4 and got.num_steps == 10


def test_perfetto_trace_of_a_fresh_xla_cpu_capture(tmp_path: Path) -> None:
    @jax.jit
    def sample(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.argmax(logits.astype(jnp.float32), axis=-1), logits

    x = jnp.ones((32, 2048), jnp.bfloat16)
    jax.block_until_ready(sample(x))
    with jax.profiler.trace(str(tmp_path / "run"), create_perfetto_trace=True):
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("decode", step_num=i):
                jax.block_until_ready(sample(x))
                if i == 1:  # a program compiled inside the window
                    jax.block_until_ready(jax.jit(lambda a: a * 2 + 1)(x))
    perfetto = next((tmp_path / "run").glob("plugins/profile/*/perfetto_trace.json.gz"))
    assert is_trace_json(perfetto)
    got = load_opstats(perfetto)
    expected = load_opstats(tmp_path / "run")
    assert_same_table(expected, got, program_ids=False)
    assert got.num_steps == 3 and sorted(got.table["occurrences"]) == [1, 3, 3]
    # The compile work: the same events, times, step and dispatched function as from the xplane.
    def compiles(s: OpStats) -> list[tuple[str, float, int, str]]:
        return [(c.name, round(c.duration_us, 3), c.step, c.function) for c in s.compile_events]
    assert any("backend_compile" in name for name, *_ in compiles(got))
    assert compiles(got) == compiles(expected)


# -- TPU, built the way libtpu writes it ----------------------------------------------------------

@pytest.fixture(scope="module")
def layer() -> RealModule:
    return compile_module(lambda x, w: jnp.tanh(x @ w) + 1.0, jnp.ones((8, 32), jnp.float32),
                          jnp.ones((32, 32), jnp.float32))


def _tpu(root: Path, layer: RealModule, chips: int, *, steps_line: bool) -> Path:
    """``chips`` TPU planes running ``layer`` 3 times; chip 1 carries device clock stats whose event
    times are off (a reader that ignores them gets every time wrong)."""
    space = SpaceBuilder()
    space.add_module(layer, BIG_ID)
    for chip in range(chips):
        core = TpuCore(space, chip)
        for i in range(3):
            ops = [(op.name, (20.0 + 5.0 * k + i) * 1000) for k, op in enumerate(layer.ops)]
            core.run(layer, BIG_ID, i * 800_000.0 + chip * 3_000.0, ops, run_id=i,
                     device_clock_skew_ns=5_000.0 if chip == 1 else None)
            if steps_line:
                core.step(i, i * 800_000.0, 800_000.0)
        # Async ops and TraceMes are not op time.
        core.side_lines(layer, BIG_ID, layer.ops[0].name, 5_000.0)
    return space.write(root)


@pytest.mark.parametrize(("chips", "steps_line"), [(2, True), (4, False)], ids=["2-chips-steps", "4-chips-no-steps"])
def test_tpu_trace(tmp_path: Path, layer: RealModule, chips: int, steps_line: bool) -> None:
    xplane = _tpu(tmp_path / "run", layer, chips, steps_line=steps_line)
    expected = load_opstats(xplane)
    got = load_opstats(xprof_trace_json(xplane, tmp_path))
    # Program ids from the XLA Modules events, shapes from each op's long_name (its HLO text).
    assert_same_table(expected, got, shapes=True)
    assert {int(p) for p in got.table["program_id"]} == {BIG_ID}
    assert got.step_source == ("device-steps" if steps_line else "module-executions")
    assert got.num_steps == 3 and set(got.table["devices"]) == {chips}
    assert list(got.table["bytes_accessed"]) == list(expected.table["bytes_accessed"])


# -- the commands --------------------------------------------------------------------------------

def test_stats_diagnose_gate_read_trace_json(tmp_path: Path) -> None:
    trace = xprof_trace_json(find_xplanes(H200)[0], tmp_path)
    stats = _run(["stats", str(trace), "--format", "json"])
    assert stats.exit_code == 0, stats.output
    doc = json.loads(stats.stdout)
    assert doc["backend"] == "gpu" and len(doc["rows"]) == len(load_opstats(H200).table)
    diag = _run(["diagnose", str(trace), "--format", "json", "-o", "-"])
    assert diag.exit_code in (0, 1), diag.output
    report = json.loads(diag.stdout)
    assert report["input_kind"] == "trace-json"
    reasons = {s["code"]: s["reason"] for s in report["rules_skipped"]}
    assert "HD002" in reasons and "none in a trace JSON" in reasons["HD002"]
    gate = _run(["gate", str(trace), str(trace)])
    assert gate.exit_code == 0, gate.output


def _write(path: Path, doc: Any, *, compress: bool = False) -> Path:
    text = json.dumps(doc)
    path.write_bytes(gzip.compress(text.encode()) if compress else text.encode())
    return path


def _cpu_events(n: int = 3) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 701, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 701, "tid": 5, "name": "thread_name", "args": {"name": "tf_XLAEigen/1"}},
    ]
    for i in range(n):
        events.append({"ph": "X", "pid": 701, "tid": 5, "ts": 100.0 * i, "dur": 40.0, "name": "copy",
                       "args": {"hlo_module": "jit_f", "hlo_op": "copy", "run_id": str(i)}})
    return events


def test_bad_inputs_exit_2_naming_the_file(tmp_path: Path) -> None:
    not_a_trace = _write(tmp_path / "a.trace.json", {"displayTimeUnit": "ns", "rows": []})
    no_ops = _write(tmp_path / "b.trace.json.gz", {"traceEvents": _cpu_events(0) + [
        {"ph": "X", "pid": 701, "tid": 5, "ts": 1.0, "dur": 2.0, "name": "$profiler.py:151 start_trace"}]},
        compress=True)
    whole = gzip.compress(json.dumps({"traceEvents": _cpu_events(2000)}).encode())
    truncated = tmp_path / "c.trace.json.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    cut_text = tmp_path / "d.trace.json"
    cut_text.write_text(json.dumps({"traceEvents": _cpu_events(50)})[:-400])
    for path, what in ((not_a_trace, "no traceEvents"), (no_ops, "no HLO op events"),
                       (truncated, "truncated"), (cut_text, "truncated")):
        for command in ("stats", "diagnose"):
            r = _run([command, str(path)])
            assert r.exit_code == 2, (path.name, command, r.output)
            assert str(path) in r.stderr and what in r.stderr, r.stderr
            assert "Traceback" not in r.output


def test_events_with_missing_args_are_counted_not_fatal(tmp_path: Path) -> None:
    events = _cpu_events(4)
    events[2]["args"].pop("hlo_module")          # an op without its module
    events.append({"ph": "X", "pid": 701, "tid": 5, "name": "copy", "args": {"hlo_op": "copy"}})  # no ts/dur
    events.append({"ph": "X", "pid": 701, "tid": 5, "ts": "soon", "dur": 3.0, "name": "copy", "args": {"hlo_op": "copy"}})
    events.append(7)                              # not an event at all
    path = _write(tmp_path / "m.trace.json", {"traceEvents": events})
    r = _run(["stats", str(path)])
    assert r.exit_code == 0, r.output
    assert "2 events without a numeric ts/dur" in r.output
    assert "1 op events without hlo_module" in r.output
    assert "1 traceEvents entries that are not objects" in r.output
    stats = load_opstats(path)
    assert sorted(stats.table["occurrences"]) == [1, 3]


def test_a_bare_list_of_events_named_anything_json(tmp_path: Path) -> None:
    # Chrome's array form, under a name that says nothing: found by its content.
    path = _write(tmp_path / "capture.json", _cpu_events(3))
    assert is_trace_json(path)
    stats = load_opstats(path)
    assert list(stats.table["occurrences"]) == [3] and stats.step_source == "module-executions"
