"""The op-stats table: categories, canonical keys, grouping, exports."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pandas as pd
import pytest

from hlo_doctor.core.errors import InputError
from hlo_doctor.hlo import parse_module
from hlo_doctor.opstats import (
    COLUMN_NAMES,
    COLUMNS,
    assign_canonical_keys,
    categorize,
    empty_table,
    from_json,
    group_by_shape,
    load_opstats,
    to_json,
    write_exports,
)

MODULE = """HloModule jit_step, is_scheduled=true

%fused_convert (p0: bf16[8,128]) -> f32[8,128] {
  %p0 = bf16[8,128]{1,0} parameter(0)
  ROOT %convert.1 = f32[8,128]{1,0} convert(%p0)
}

%fused_dot (p0: f32[8,128], p1: f32[128,64]) -> f32[8,64] {
  %p0 = f32[8,128]{1,0} parameter(0)
  %p1 = f32[128,64]{1,0} parameter(1)
  %dot.1 = f32[8,64]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %tanh.1 = f32[8,64]{1,0} tanh(%dot.1)
}

%fused_elementwise (p0: f32[8,128]) -> f32[8,128] {
  %p0 = f32[8,128]{1,0} parameter(0)
  ROOT %exp.1 = f32[8,128]{1,0} exponential(%p0)
}

%fused_elementwise.1 (p0: f32[8,128]) -> f32[8,128] {
  %p0 = f32[8,128]{1,0} parameter(0)
  ROOT %neg.1 = f32[8,128]{1,0} negate(%p0)
}

%fused_transpose (p0: f32[8,128]) -> f32[128,8] {
  %p0 = f32[8,128]{1,0} parameter(0)
  ROOT %t.1 = f32[128,8]{1,0} transpose(%p0), dimensions={1,0}
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: bf16[8,128], w: f32[128,64]) -> (f32[8,64], f32[128,8], f32[8]) {
  %x = bf16[8,128]{1,0} parameter(0)
  %w = f32[128,64]{1,0} parameter(1)
  %wrapped_convert = f32[8,128]{1,0} fusion(%x), kind=kLoop, calls=%fused_convert
  %dot_fusion = f32[8,64]{1,0} fusion(%wrapped_convert, %w), kind=kOutput, calls=%fused_dot
  %exp_fusion = f32[8,128]{1,0} fusion(%wrapped_convert), kind=kLoop, calls=%fused_elementwise
  %neg_fusion = f32[8,128]{1,0} fusion(%wrapped_convert), kind=kLoop, calls=%fused_elementwise.1
  %transpose_fusion = f32[128,8]{1,0} fusion(%exp_fusion), kind=kLoop, calls=%fused_transpose
  %copy.2 = f32[8,64]{1,0} copy(%dot_fusion)
  %zero = f32[] constant(0)
  %reduce.3 = f32[8]{0} reduce(%neg_fusion, %zero), dimensions={1}, to_apply=%add
  %all-reduce.1 = f32[8]{0} all-reduce(%reduce.3), to_apply=%add
  %cc = f32[8]{0} custom-call(%all-reduce.1), custom_call_target="foo"
  ROOT %out = (f32[8,64]{1,0}, f32[128,8]{1,0}, f32[8]{0}) tuple(%copy.2, %transpose_fusion, %cc)
}
"""


@pytest.fixture(scope="module")
def module():  # type: ignore[no-untyped-def]
    return parse_module(MODULE, program_id=7)


@pytest.mark.parametrize("op, category", [
    ("wrapped_convert", "convert"), ("dot_fusion", "matmul"), ("exp_fusion", "elementwise"),
    ("transpose_fusion", "data-movement"), ("copy.2", "copy"), ("reduce.3", "reduce"),
    ("all-reduce.1", "collective"), ("cc", "custom-call"), ("zero", "other"),
])
def test_categories_from_opcode_and_fusion_body(module, op: str, category: str) -> None:  # type: ignore[no-untyped-def]
    assert categorize(module, module.instruction(op)) == category


@pytest.mark.parametrize("name, category", [
    ("wrapped_convert", "convert"), ("copy.2", "copy"), ("iota_reduce_fusion", "reduce"),
    ("all-gather-start.1", "collective"), ("transpose.4", "data-movement"), ("while.1", "other"),
])
def test_categories_from_the_name_alone(name: str, category: str) -> None:
    assert categorize(None, None, name) == category


def test_canonical_keys_are_unique_and_stable(module) -> None:  # type: ignore[no-untyped-def]
    def rows(order: list[str], pid: int) -> list[dict]:
        out = []
        for op in order:
            inst = module.instruction(op)
            out.append({"module": "jit_step", "program_id": pid, "op": op, "opcode": inst.opcode,
                        "shape": inst.shape.text()})
        return out

    from hlo_doctor.opstats.keys import body_digest  # the digest is what disambiguates

    ops = ["exp_fusion", "neg_fusion", "wrapped_convert", "copy.2"]
    first = rows(ops, 7)
    assign_canonical_keys(first, [body_digest(module, module.instruction(r["op"]), "") for r in first])
    keys = {r["op"]: r["canonical_key"] for r in first}
    assert keys["copy.2"] == "jit_step|copy|f32[8,64]"
    # Three fusions share module|opcode|shape: their bodies tell them apart.
    shared = [keys[op] for op in ("exp_fusion", "neg_fusion", "wrapped_convert")]
    assert all(k.startswith("jit_step|fusion|f32[8,128]#") for k in shared)
    assert len(set(shared)) == 3
    # Another program id (a recompile) and another row order give the same keys.
    again = rows(list(reversed(ops)), 12)
    assign_canonical_keys(again, [body_digest(module, module.instruction(r["op"]), "") for r in again])
    assert {r["op"]: r["canonical_key"] for r in again} == keys
    # Identical bodies fall back to the op-name order.
    twins = [{"module": "m", "program_id": 1, "op": n, "opcode": "fusion", "shape": "f32[2]{0}"}
             for n in ("fusion.10", "fusion.9")]
    assign_canonical_keys(twins, ["abc", "abc"])
    assert [r["canonical_key"] for r in twins] == ["m|fusion|f32[2]#abc.1", "m|fusion|f32[2]#abc.0"]


def test_column_spec_is_complete() -> None:
    assert len(set(COLUMN_NAMES)) == len(COLUMNS)
    table = empty_table()
    assert list(table.columns) == list(COLUMN_NAMES)
    assert {c.name: str(table[c.name].dtype) for c in COLUMNS} == {c.name: c.dtype for c in COLUMNS}
    for c in COLUMNS:
        if c.name.endswith("_us"):
            assert c.unit == "us"
        if c.name.startswith("bytes"):
            assert c.unit == "bytes"


def test_group_by_shape_adds_up() -> None:
    table = pd.DataFrame({
        "opcode": ["copy", "copy", "fusion"], "shape": ["f32[4]{0}", "f32[4]{0}", "f32[4]{0}"],
        "op": ["copy.1", "copy.2", "f"], "category": ["copy", "copy", "elementwise"],
        "occurrences": [2, 3, 1], "total_time_us": [1.0, 2.0, 10.0], "time_per_step_us": [0.5, 1.0, 5.0],
        "pct_of_step": [5.0, 10.0, 50.0], "bytes_accessed": [32, 32, 32], "module": ["a", "b", "a"],
    })
    grouped = group_by_shape(table)
    assert list(grouped["opcode"]) == ["fusion", "copy"]
    copy = grouped.iloc[1]
    assert copy["ops"] == 2 and copy["occurrences"] == 5 and copy["time_per_step_us"] == 1.5
    assert copy["modules"] == "a; b" and copy["rank"] == 2


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("opstats")
    f = jax.jit(lambda a: (jnp.exp(a).sum(), a))
    x = jnp.ones((32, 32))
    jax.block_until_ready(f(x))
    jax.profiler.start_trace(str(out))
    try:
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("decode", step_num=i):
                jax.block_until_ready(f(x))
    finally:
        jax.profiler.stop_trace()
    return out


def test_json_round_trip_keeps_what_gate_needs(small_run: Path, tmp_path: Path) -> None:
    stats = load_opstats(small_run)
    csv_path, json_path = write_exports(stats, tmp_path)
    back = from_json(json_path.read_text())
    pd.testing.assert_frame_equal(back.table, stats.table)
    pd.testing.assert_frame_equal(back.per_step, stats.per_step)
    assert back.step_times_us == stats.step_times_us and back.num_steps == 3
    assert back.step_source == "annotation" and back.backend == "cpu"
    assert back.compile_events == stats.compile_events
    doc = json.loads(json_path.read_text())
    assert [c["name"] for c in doc["columns"]] == list(COLUMN_NAMES)
    assert pd.read_csv(csv_path).shape == (len(stats.table), len(COLUMN_NAMES))
    assert stats.module("jit__lambda") is not None or stats.modules


def test_from_json_rejects_other_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not JSON"):
        from_json("{", origin="x.json")
    with pytest.raises(InputError, match="not an hlo-doctor opstats export"):
        from_json(json.dumps({"rows": []}), origin="x.json")
    (tmp_path / "t.json").write_text("[1, 2]")
    with pytest.raises(InputError):
        load_opstats(tmp_path / "t.json")


def test_from_json_reads_the_format_key_of_older_exports(small_run: Path) -> None:
    doc = json.loads(to_json(load_opstats(small_run)))
    doc["format"] = doc.pop("schema")
    again = from_json(json.dumps(doc))
    assert len(again.table) == len(load_opstats(small_run).table)
    committed = Path(__file__).parents[2] / "sample_traces" / "engine_b64_fixed" / "opstats.json"
    assert '"format": "hlo-doctor.opstats/1"' in committed.read_text()
    assert len(load_opstats(committed).table) > 0


def test_to_json_writes_a_missing_value_as_null_and_refuses_it_back(small_run: Path) -> None:
    """Strict JSON out (null, never NaN); a time that is missing is bad input coming back in, named by
    its field, so a gate or a diagnosis never runs on it."""
    stats = load_opstats(small_run)
    table = stats.table.copy()
    table.loc[0, "total_time_us"] = float("nan")
    text = to_json(dataclasses.replace(stats, table_data=table))
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert doc["rows"][0]["total_time_us"] is None
    with pytest.raises(InputError, match=r"rows\[0\]\.total_time_us"):
        from_json(text)


def test_to_json_is_plain_json(small_run: Path) -> None:
    doc = json.loads(to_json(load_opstats(small_run)))
    assert next(iter(doc)) == "schema" and doc["schema"] == "hlo-doctor.opstats/1" and "format" not in doc
    assert "pct_of_step_definition" in doc and doc["rows"]
    assert all(isinstance(r["program_id"], int) for r in doc["rows"])
