"""Reading xplanes: real XLA:CPU captures, and TPU/GPU-shaped traces built here byte by byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from xspace_builder import field

from hlo_doctor.hlo import module_text_from_proto
from hlo_doctor.opstats import build_opstats, load_opstats
from hlo_doctor.trace import find_xplanes, module_protos_from_xspace, read_trace


@jax.jit
def _sample(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jnp.argmax(logits, axis=-1), logits


@jax.jit
def _scale(x: jax.Array) -> jax.Array:
    return (x * 2.0 + 1.0).sum(axis=0)


def _capture(out: Path, steps: int, annotate: bool) -> Path:
    x = jnp.ones((16, 1024), jnp.bfloat16)
    for _ in range(2):
        jax.block_until_ready(_sample(x.astype(jnp.float32)))
        jax.block_until_ready(_scale(x))
    jax.profiler.start_trace(str(out))
    try:
        for i in range(steps):
            if annotate:
                with jax.profiler.StepTraceAnnotation("decode", step_num=i):
                    jax.block_until_ready(_sample(x.astype(jnp.float32)))
                    jax.block_until_ready(_scale(x))
            else:
                jax.block_until_ready(_sample(x.astype(jnp.float32)))
                jax.block_until_ready(_scale(x))
    finally:
        jax.profiler.stop_trace()
    return out


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _capture(tmp_path_factory.mktemp("annotated"), 5, True)


def _independent_module_sums(xplane: Path) -> dict[tuple[str, int], float]:
    """Sum of op event durations per module, walked straight from ProfileData (not trace.py)."""
    from jax.profiler import ProfileData

    sums: dict[tuple[str, int], float] = {}
    for plane in ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for ev in line.events:
                stats = dict(ev.stats)
                if "hlo_op" in stats:
                    key = (str(stats["hlo_module"]), int(stats["program_id"]))
                    sums[key] = sums.get(key, 0.0) + ev.duration_ns / 1e3
    return sums


def test_table_totals_equal_the_trace_events_per_module(annotated: Path) -> None:
    stats = load_opstats(annotated)
    xplane = find_xplanes(annotated)[0]
    expected = _independent_module_sums(xplane)
    got = stats.table.groupby(["module", "program_id"])["total_time_us"].sum()
    assert {(str(m), int(p)) for m, p in got.index} == set(expected)
    for (module, pid), total in expected.items():
        assert got[(module, pid)] == pytest.approx(total, rel=1e-9), module
    # Per-step samples cover the same events (all ran inside the annotated steps).
    assert stats.per_step["time_us"].sum() == pytest.approx(sum(expected.values()), rel=1e-9)


def test_module_protos_match_what_xprof_extracts(annotated: Path, tmp_path: Path) -> None:
    from xprof.convert import raw_to_tool_data

    xplane = find_xplanes(annotated)[0]
    copy = tmp_path / xplane.name
    shutil.copy(xplane, copy)  # xprof writes files beside its input: never beside ours
    tools = raw_to_tool_data.xspace_to_tool_names([str(copy)])
    assert "trace_viewer" in tools or "trace_viewer@" in tools
    # xprof re-serializes the proto (bytes differ); the module it holds must be the same.
    from_xprof = {p.name: module_text_from_proto(p.read_bytes()) for p in tmp_path.glob("*.hlo_proto.pb")}
    ours = {f"{m.name}({m.program_id}).hlo_proto.pb": module_text_from_proto(m.hlo_proto)
            for m in module_protos_from_xspace(xplane.read_bytes())}
    assert from_xprof and ours == from_xprof


def test_steps_from_module_executions_without_annotations(tmp_path: Path) -> None:
    stats = load_opstats(_capture(tmp_path, 4, annotate=False))
    assert stats.step_source == "module-executions"
    assert stats.num_steps == 4 and len(stats.step_times_us) == 4
    assert any("executions of" in w for w in stats.warnings)
    main = stats.table.groupby("module")["total_time_us"].sum().idxmax()
    for row in stats.table[stats.table["module"] == main].itertuples():
        assert row.occurrences == 4


def test_compile_inside_the_window_is_reported(tmp_path: Path) -> None:
    @jax.jit
    def fresh(x: jax.Array) -> jax.Array:
        return jnp.cos(x) * 3.0

    jax.profiler.start_trace(str(tmp_path))
    try:
        with jax.profiler.StepTraceAnnotation("decode", step_num=0):
            jax.block_until_ready(fresh(jnp.ones((8, 8))))
    finally:
        jax.profiler.stop_trace()
    stats = load_opstats(tmp_path)
    names = " ".join(c.name for c in stats.compile_events)
    assert "backend_compile" in names or "compile_or_get_cached" in names, names
    assert all(c.duration_us >= 0 for c in stats.compile_events)


def test_self_time_subtracts_nested_ops(tmp_path: Path) -> None:
    # XLA:CPU runs a while loop's body thunks nested inside the loop's own event.
    @jax.jit
    def loop(x: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) + v * 0.5, x)

    x = jnp.ones((256, 256))
    jax.block_until_ready(loop(x))
    jax.profiler.start_trace(str(tmp_path))
    try:
        with jax.profiler.StepTraceAnnotation("decode", step_num=0):
            jax.block_until_ready(loop(x))
    finally:
        jax.profiler.stop_trace()
    table = load_opstats(tmp_path).table
    assert (table["self_time_us"] <= table["total_time_us"] + 1e-9).all()
    (loop_row,) = table[table["opcode"] == "while"].itertuples()
    body = table[(table["opcode"] != "while") & (table["occurrences"] == 3)]
    assert len(body)  # the body's ops ran once per iteration, nested inside the loop's event
    # Body thunks run nested on the loop's own thread, except those XLA:CPU hands to its thread pool
    # (which ones varies with load): what is subtracted is some, never more than all, of the body.
    nested_us = loop_row.total_time_us - loop_row.self_time_us
    assert 0 < nested_us <= body["total_time_us"].sum() * (1 + 1e-6)


# ---------------------------------------------------------------------------------------------
# TPU/GPU-shaped traces, encoded here with the XSpace schema (tsl/profiler/protobuf/xplane.proto)
# ---------------------------------------------------------------------------------------------

class _Plane:
    """Builds one XPlane: metadata ids are handed out as names and stat names are first used."""

    def __init__(self, plane_id: int, name: str) -> None:
        self.id, self.name = plane_id, name
        self.events: dict[str, int] = {}
        self.event_stats: dict[int, bytes] = {}
        self.stats: dict[str, int] = {}
        self.lines: list[bytes] = []

    def _stat(self, name: str, value: int | str | bytes) -> bytes:
        sid = self.stats.setdefault(name, len(self.stats) + 1)
        kind = 4 if isinstance(value, int) else (5 if isinstance(value, str) else 6)
        return field(1, sid) + field(kind, value)

    def event_metadata(self, name: str, display: str = "", **stats: int | str | bytes) -> int:
        mid = self.events.setdefault(name, len(self.events) + 1)
        self.event_stats[mid] = b"".join(field(5, self._stat(k, v)) for k, v in stats.items())
        if display:
            self.event_stats[mid] += field(4, display)
        return mid

    def line(self, line_id: int, name: str, events: list[tuple[str, float, float, dict[str, int | str]]]) -> None:
        body = field(1, line_id) + field(2, name) + field(3, 1_000_000)
        for ev_name, start_us, dur_us, stats in events:
            mid = self.events.get(ev_name) or self.event_metadata(ev_name)
            ev = field(1, mid) + field(2, int(start_us * 1e6)) + field(3, int(dur_us * 1e6))
            ev += b"".join(field(4, self._stat(k, v)) for k, v in stats.items())
            body += field(4, ev)
        self.lines.append(body)

    def encode(self) -> bytes:
        out = field(1, self.id) + field(2, self.name)
        out += b"".join(field(3, ln) for ln in self.lines)
        for name, mid in self.events.items():
            meta = field(1, mid) + field(2, name) + self.event_stats.get(mid, b"")
            out += field(4, field(1, mid) + field(2, meta))
        for name, sid in self.stats.items():
            out += field(5, field(1, sid) + field(2, field(1, sid) + field(2, name)))
        return out


def _xspace(*planes: _Plane) -> bytes:
    return b"".join(field(1, p.encode()) for p in planes) + field(4, "tpu-host")


@pytest.fixture(scope="module")
def real_module(annotated: Path) -> tuple[str, int, bytes, list[str]]:
    """A real HLO module (name, program id, HloProto bytes, entry op names) from the CPU capture."""
    from hlo_doctor.hlo import parse_module

    protos = module_protos_from_xspace(find_xplanes(annotated)[0].read_bytes())
    # The capture's own jit__sample: a process that ran the tests of other files may hold (and
    # list) a jit__sample of other shapes too.
    proto, module = next((p, m) for p in protos if p.name == "jit__sample"
                         and "f32[16,1024]" in (m := parse_module(module_text_from_proto(p.hlo_proto))).text)
    ops = [i.name for i in module.entry_instructions() if i.opcode not in ("parameter", "tuple")]
    assert proto.program_id is not None
    return proto.name, proto.program_id, proto.hlo_proto, ops


def _tpu_trace(real_module: tuple[str, int, bytes, list[str]], with_metadata: bool) -> bytes:
    name, pid, proto, ops = real_module
    meta = _Plane(1, "/host:metadata")
    if with_metadata:
        meta.event_metadata(f"{name}({pid})", **{"Hlo Proto": proto, "program_id": pid})
    host = _Plane(2, "/host:CPU")
    # Two steps; the host also ran a small XLA:CPU program, which a device trace must not count.
    host.line(1, "python", [("decode", 0.0, 100.0, {"step_num": 0}), ("decode", 100.0, 100.0, {"step_num": 1})])
    host.line(2, "tf_XLAEigen/1", [("host_op", 10.0, 5.0, {"hlo_op": "add", "hlo_module": "jit_host",
                                                           "program_id": 99})])
    planes = [meta, host]
    for core in range(2):
        dev = _Plane(10 + core, f"/device:TPU:{core}")
        dev.line(1, "XLA Modules", [(f"{name}({pid})", 10.0, 60.0, {}), (f"{name}({pid})", 110.0, 60.0, {})])
        events: list[tuple[str, float, float, dict[str, int | str]]] = []
        for base in (10.0, 110.0):
            t = base
            for k, op in enumerate(ops):
                events.append((op, t, 10.0 + k, {}))
                t += 12.0 + k
        dev.line(2, "XLA Ops", events)
        # Steps and framework lines exist on real device planes; they are not op events.
        dev.line(3, "Steps", [("0", 0.0, 100.0, {}), ("1", 100.0, 100.0, {})])
        planes.append(dev)
    return _xspace(*planes)


def test_tpu_device_planes(tmp_path: Path, real_module: tuple[str, int, bytes, list[str]]) -> None:
    name, pid, _, ops = real_module
    path = tmp_path / "tpu-host.xplane.pb"
    path.write_bytes(_tpu_trace(real_module, with_metadata=True))
    trace = read_trace([path])
    assert trace.backend == "tpu"
    assert set(trace.ops.module) == {name} and set(trace.ops.program_id) == {pid}
    assert len(trace.ops) == 2 * 2 * len(ops)  # 2 cores x 2 steps
    stats = build_opstats(trace)
    assert stats.step_source == "annotation" and stats.num_steps == 2
    assert stats.step_time_us == pytest.approx(100.0)
    table = stats.table
    assert set(table["module"]) == {name} and "jit_host" not in set(table["module"])
    for k, op in enumerate(ops):
        row = table[table["op"] == op].iloc[0]
        assert row["devices"] == 2 and row["occurrences"] == 4
        assert row["time_per_step_us"] == pytest.approx(10.0 + k)
        assert row["pct_of_step"] == pytest.approx(10.0 + k)
        assert row["shape"]  # joined with the module from the metadata plane
    copy = table[table["opcode"] == "copy"].iloc[0]
    assert copy["shape"] == "f32[16,1024]{1,0}" and copy["category"] == "copy"


def test_tpu_steps_from_module_executions_without_metadata(
    tmp_path: Path, real_module: tuple[str, int, bytes, list[str]],
) -> None:
    name, pid, _, ops = real_module
    data = _tpu_trace(real_module, with_metadata=False)
    path = tmp_path / "tpu-host.xplane.pb"
    path.write_bytes(data)
    stats = load_opstats(path)
    assert stats.modules == () and set(stats.table["module"]) == {name}
    assert set(stats.table["shape"]) == {""}  # nothing to join with: said, not invented
    assert stats.step_source == "annotation"


def test_gpu_stream_kernels(tmp_path: Path) -> None:
    dev = _Plane(10, "/device:GPU:0")
    kernels = [("loop_add_fusion", 0.0, 4.0, {"hlo_op": "add_fusion", "hlo_module": "jit_step", "program_id": 3}),
               ("gemm_kernel", 5.0, 20.0, {"hlo_op": "dot.1", "hlo_module": "jit_step", "program_id": 3}),
               ("loop_add_fusion", 50.0, 4.0, {"hlo_op": "add_fusion", "hlo_module": "jit_step", "program_id": 3}),
               ("gemm_kernel", 55.0, 22.0, {"hlo_op": "dot.1", "hlo_module": "jit_step", "program_id": 3}),
               ("memcpy", 80.0, 1.0, {})]
    dev.line(1, "Stream #7(compute)", kernels)
    path = tmp_path / "gpu-host.xplane.pb"
    path.write_bytes(_xspace(_Plane(1, "/host:metadata"), dev))
    stats = load_opstats(path)
    assert stats.backend == "gpu"
    assert stats.step_source == "module-executions" and stats.num_steps == 2
    dot = stats.table[stats.table["op"] == "dot.1"].iloc[0]
    assert dot["occurrences"] == 2 and dot["total_time_us"] == pytest.approx(42.0)
    assert dot["category"] == "matmul" and stats.table.iloc[0]["op"] == "dot.1"
    # Step 0 runs from the first execution's start to the second's; the last one to the end of
    # the last op event (the memcpy is not an HLO op).
    assert stats.step_times_us == pytest.approx((50.0, 27.0))


def test_tpu_op_names_and_shapes_from_event_metadata(tmp_path: Path) -> None:
    """TPU op events named by their HLO text, the op name in the metadata's display name, the
    program id as a metadata stat, and no HLO module in the trace: shapes come from the text."""
    dev = _Plane(10, "/device:TPU:0")
    copy_text = "%copy.2 = f32[512,256000]{1,0:T(8,128)} copy(f32[512,256000]{1,0:T(8,128)} %param.1)"
    convert_text = ("%convert_element_type.1 = f32[512,256000]{1,0} convert(bf16[512,256000]{1,0} "
                    "%Arg_0.1)")
    dev.event_metadata(copy_text, display="copy.2", program_id=41)
    dev.event_metadata(convert_text, display="convert_element_type.1", program_id=40)
    dev.line(1, "XLA Modules", [("jit_sample(41)", 0.0, 10.0, {}), ("jit_convert_element_type(40)", 20.0, 5.0, {}),
                                ("jit_sample(41)", 100.0, 10.0, {}),
                                ("jit_convert_element_type(40)", 120.0, 5.0, {})])
    dev.line(2, "XLA Ops", [(copy_text, 1.0, 8.0, {}), (convert_text, 21.0, 3.0, {}),
                            (copy_text, 101.0, 8.0, {}), (convert_text, 121.0, 3.0, {})])
    path = tmp_path / "tpu.xplane.pb"
    path.write_bytes(_xspace(_Plane(1, "/host:metadata"), dev))
    stats = load_opstats(path)
    table = stats.table.set_index("op")
    assert set(table.index) == {"copy.2", "convert_element_type.1"}
    copy = table.loc["copy.2"]
    assert copy["module"] == "jit_sample" and copy["program_id"] == 41
    assert copy["opcode"] == "copy" and copy["category"] == "copy"
    assert copy["shape"] == "f32[512,256000]{1,0:T(8,128)}" and copy["canonical_key"] == "jit_sample|copy|f32[512,256000]"
    assert copy["bytes_read"] == copy["bytes_written"] == 512 * 256000 * 4
    convert = table.loc["convert_element_type.1"]
    assert convert["category"] == "convert" and convert["operand_shapes"] == "bf16[512,256000]{1,0}"
    assert convert["bytes_read"] == 512 * 256000 * 2 and convert["program_id"] == 40
    assert stats.step_source == "module-executions" and stats.num_steps == 2


def test_xprof_hlo_stats_columns_by_id(tmp_path: Path, real_module: tuple[str, int, bytes, list[str]]) -> None:
    """xprof's hlo_stats on a device trace: columns are found by id, whatever their order."""
    import json

    from xprof.convert import raw_to_tool_data

    from hlo_doctor.trace import datatable_rows, xprof_hlo_stats

    path = tmp_path / "tpu-host.xplane.pb"
    path.write_bytes(_tpu_trace(real_module, with_metadata=False))
    assert xprof_hlo_stats([path]) == []  # xprof finds no TPU core details in a built trace
    assert [p.name for p in tmp_path.iterdir()] == ["tpu-host.xplane.pb"]  # nothing written beside it
    copy = tmp_path / "copy" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "hlo_stats", {})
    cols = json.loads(data)["cols"]  # this xprof release's real columns
    ids = [c["id"] for c in cols]
    assert {"program_id", "hlo_op_name", "hlo_op_expression", "category"} <= set(ids)
    values = {"program_id": "7", "hlo_op_name": "copy.2", "category": "data formatting",
              "hlo_op_expression": "%copy.2 = f32[8]{0} copy(f32[8]{0} %p)"}
    reordered = list(reversed(cols))
    doc = {"cols": reordered, "rows": [{"c": [{"v": values.get(c["id"])} for c in reordered]}]}
    (row,) = datatable_rows(doc)
    assert {k: row[k] for k in values} == values
