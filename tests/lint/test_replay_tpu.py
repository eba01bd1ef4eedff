"""Replay of an XLA:TPU capture: its optimized modules made readable by jaxlib's importer and portable
to a PJRT plugin, and the refusals where this machine cannot run them.

The judges are jaxlib's own: its importer (``hlo_to_stablehlo``) refuses the bundled TPU capture's
``jit_sample`` as captured (XLA:TPU left its argmax's reduce with f32 reducers and a bf16 result)
and reads it after the repair; its portable-artifact serializer (what a plugin such as XLA:TPU is
handed) accepts every sampler program of the bundled TPU captures; XLA:CPU compiles the repaired
module and numpy judges what it computes. The runs on the chip itself are in docs/rules.md.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.lib import _jax
from jax._src.lib import xla_client as xc
from jaxlib.mlir.dialects import stablehlo

from hlo_doctor.hlo.proto import module_problem, module_proto_bytes
from hlo_doctor.lint import diagnose, load_context, load_rulebook
from hlo_doctor.lint.replay import measure_fix, replay_refusal
from hlo_doctor.lint.replay.child import ReplayError, _device
from hlo_doctor.lint.replay.launch import _held_here
from hlo_doctor.lint.replay.mlir_edit import module_text
from hlo_doctor.lint.replay.proto_repair import (
    _messages,
    drop_tiled_layout_constraints,
    widen_narrowed_reductions,
)
from hlo_doctor.lint.replay.run import _MEMO
from hlo_doctor.lint.replay.spec import ReplaySpec
from hlo_doctor.trace.read import find_xplanes, read_module_protos

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TPU_CAPTURES = ("tpu_v5e_original", "tpu_v5e_fixed", "tpu_v5e_seed_b512", "tpu_v5e_seed_b512_fixed")
SAMPLER_PROGRAMS = ("jit_sample", "jit_sample_fixed", "jit_convert_element_type", "jit_compute_logits")


def _protos(capture: str) -> dict[str, bytes]:
    return {p.name: module_proto_bytes(p.hlo_proto) for p in read_module_protos(find_xplanes(SAMPLES / capture)[0])}


def _imported(raw: bytes) -> str:
    """jaxlib's importer's module, parsed and verified by MLIR (where a bad reduce is refused)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        return str(ir.Module.parse(_jax.mlir.hlo_to_stablehlo(raw)))


def _compile_cpu(text: str) -> object:
    device = jax.devices("cpu")[0]
    return device.client.compile_and_load(text.encode(), xc.DeviceList((device,)), xc.CompileOptions())


def _run(exe: object, *args: np.ndarray) -> list[np.ndarray]:
    device = jax.devices("cpu")[0]
    outs = exe.execute_sharded([jax.device_put(a, device) for a in args])  # type: ignore[attr-defined]
    return [np.asarray(o[0]) for o in outs.disassemble_into_single_device_arrays()]


def test_the_captured_sampler_is_refused_by_the_importer_and_read_after_the_repair() -> None:
    raw = _protos("tpu_v5e_original")["jit_sample"]
    with pytest.raises(Exception, match="stablehlo.reduce"):
        _imported(raw)
    repaired, n = widen_narrowed_reductions(raw)
    assert n == 1
    assert module_problem(repaired) is None
    assert "stablehlo.reduce" in _imported(repaired)


def test_the_repaired_sampler_computes_what_the_capture_did() -> None:
    """The argmax's indices and the copied logits, on XLA:CPU, against numpy."""
    text = module_text(_protos("tpu_v5e_original")["jit_sample"])
    assert "mhlo.async_start" not in text and "mhlo.async_done" not in text
    x = np.random.default_rng(0).standard_normal((64, 256000), dtype=np.float32)
    index, copied = _run(_compile_cpu(text), x)
    assert np.array_equal(index, np.argmax(x, axis=1))
    assert np.array_equal(copied, x)


def test_an_array_reduce_narrowed_in_place_is_widened_and_converted_back() -> None:
    """A sum whose result XLA:TPU would have narrowed to bf16 (its f32 body kept): the importer
    refuses it, reads it repaired, and XLA:CPU computes numpy's sum rounded to bf16."""
    x = np.random.default_rng(1).standard_normal((8, 128), dtype=np.float32)
    lowered = jax.jit(lambda a: jax.lax.reduce(a, np.float32(0), jax.lax.add, (1,))).lower(x)
    hlo = lowered.compiler_ir("hlo")
    assert hlo is not None
    module = _messages().FromString(hlo.as_serialized_hlo_module_proto())
    reduce = next(ins for comp in module.computations for ins in comp.instructions if ins.opcode == "reduce")
    reduce.shape.element_type = 16  # BF16 in xla_data.proto's PrimitiveType: what XLA:TPU leaves
    narrowed = module.SerializeToString()
    with pytest.raises(Exception, match="stablehlo.reduce"):
        _imported(narrowed)
    repaired, n = widen_narrowed_reductions(narrowed)
    assert n == 1 and module_problem(repaired) is None
    (total,) = _run(_compile_cpu(module_text(repaired)), x)
    assert total.dtype == jnp.bfloat16
    np.testing.assert_array_equal(total, np.asarray(jnp.asarray(x.sum(axis=1, dtype=np.float32)).astype(jnp.bfloat16)))


def test_the_decode_forward_with_tiled_layout_constraints_is_read_after_the_repair() -> None:
    """XLA:TPU constrained the gather's indices to ``s32[1024]{0:T(1024)}`` (an
    ``AssumeGatherIndicesInBound`` call): the importer refuses the module as captured, reads it with
    the constraint taken off, jaxlib's portable serializer accepts it, and XLA:CPU compiles it with
    the gathers in place (the assumption, which only XLA:TPU knows, left to the compiler)."""
    raw = _protos("tpu_v5e_original")["jit_decode_forward"]
    with pytest.raises(Exception, match="Tiled layout is not supported"):
        _imported(raw)
    repaired, n = drop_tiled_layout_constraints(raw)
    assert n == 1 and module_problem(repaired) is None
    assert "AssumeGatherIndicesInBound" in _imported(repaired)
    portable = module_text(raw, portable=True)
    assert "custom_call" not in portable
    assert _jax.mlir.serialize_portable_artifact(portable, stablehlo.get_current_version(), False)
    compiled = "\n".join(m.to_string() for m in _compile_cpu(module_text(raw)).hlo_modules())  # type: ignore[attr-defined]
    assert " gather(" in compiled


def test_modules_without_a_tiled_layout_constraint_are_left_byte_for_byte() -> None:
    for name, raw in {**_protos("engine_b64_original_a"), **_protos("tpu_v5e_seed_b512"),
                      **_protos("gpu_h200_original")}.items():
        assert drop_tiled_layout_constraints(raw) == (raw, 0), name


def test_modules_without_a_narrowed_reduce_are_left_byte_for_byte() -> None:
    for name, raw in {**_protos("engine_b64_original_a"), **_protos("tpu_v5e_fixed")}.items():
        assert widen_narrowed_reductions(raw) == (raw, 0), name


@pytest.mark.parametrize("capture", (*TPU_CAPTURES, "gpu_h200_original", "gpu_h200_seed_b512"))
def test_every_sampler_program_of_the_tpu_and_gpu_captures_is_a_portable_artifact(capture: str) -> None:
    """What a PJRT plugin is handed: jaxlib's serializer refuses an MHLO op StableHLO lacks (the
    copies XLA:TPU made) and the captured placement attributes."""
    found = {name: raw for name, raw in _protos(capture).items() if name in SAMPLER_PROGRAMS}
    assert found
    for name, raw in found.items():
        text = module_text(raw, portable=True)
        assert "mhlo.copy" not in text and "cross_program_prefetch" not in text, name
        assert _jax.mlir.serialize_portable_artifact(text, stablehlo.get_current_version(), False), name


def test_a_tpu_capture_is_refused_here_in_one_line() -> None:
    ctx = replace(load_context(SAMPLES / "tpu_v5e_original"), what_if=True)
    assert ctx.backend == "tpu" and ctx.device_kind.casefold() == "tpu v5 lite"
    assert replay_refusal(ctx) == ("the capture is from XLA:TPU and this machine has no TPU runtime "
                                   "(libtpu is not installed)")
    assert replay_refusal(replace(ctx, backend="gpu")) == ("the capture is from XLA:GPU and this machine has no GPU "
                                                           "runtime (jax-cuda12-plugin is not installed)")
    assert replay_refusal(replace(ctx, backend="rocm")) == "the capture is from rocm, not XLA:CPU or XLA:TPU or XLA:GPU"
    assert not _held_here("tpu") and not _held_here("gpu")


def test_the_child_refuses_another_chip_and_a_missing_platform() -> None:
    with pytest.raises(ReplayError, match="the capture ran on TPU v5 lite, this machine's device is cpu"):
        _device(ReplaySpec(a=(), b=(), platform="cpu", device_kind="TPU v5 lite"))
    with pytest.raises(ReplayError, match="this machine has no TPU device jax can use"):
        _device(ReplaySpec(a=(), b=(), platform="tpu"))
    assert _device(ReplaySpec(a=(), b=(), platform="cpu", device_kind="CPU")).platform == "cpu"


def test_the_tpu_captures_sampler_fix_replays_whole_on_this_cpu() -> None:
    """The plan, the repair and both sides' compiles on a TPU capture, run on XLA:CPU (labelled as
    this machine's capture): side B no longer runs the convert program nor the copy."""
    ctx = load_context(SAMPLES / "tpu_v5e_original")
    findings = diagnose(ctx, load_rulebook()).findings
    here = replace(ctx, what_if=True, backend="cpu", device_kind="",
                   versions=(("jax", jax.__version__), ("jaxlib", jax.lib.__version__)))
    _MEMO.clear()
    m = measure_fix(here, "bf16-greedy-sampler", [f for f in findings if f.code in ("HD002", "HD003", "HD004")],
                    seconds=0.5, cap_seconds=1.0)
    assert not isinstance(m, str), m
    assert m.covered == ("HD002", "HD003", "HD004")
    assert any(r.startswith("program jit_convert_element_type") for r in m.removed)
    assert any(r.startswith("jit_sample") and " copy " in r for r in m.removed)
    on_chip = replace(m, chip="TPU v5 lite", same_machine=True)
    assert "the capture's chip (TPU v5 lite) is this machine's, so that is the promise, untraced" in on_chip.line()
    assert on_chip.promise_us == on_chip.saving_us and on_chip.to_dict()["chip"] == "TPU v5 lite"


def test_a_replay_in_this_process_is_bounded_in_time(tmp_path: Path) -> None:
    """Where this process holds the device, the replay runs here (no child to stop): its document
    within the bound, and past it the one line a stopped child gives, without waiting for it."""
    import time

    from hlo_doctor.lint.replay.launch import _run_here
    from hlo_doctor.lint.replay.plan import capture_protos, plan

    ctx = load_context(SAMPLES / "tpu_v5e_original")
    findings = [f for f in diagnose(ctx, load_rulebook()).findings if f.code in ("HD002", "HD003", "HD004")]
    p = plan(replace(ctx, what_if=True, backend="cpu", device_kind=""), findings)
    assert not isinstance(p, str), p
    protos = capture_protos(ctx, p)
    assert not isinstance(protos, str), protos
    for name, data in protos.items():
        (tmp_path / name).write_bytes(data)
    ReplaySpec(a=p.a, b=p.b, seconds=0.3, cap_seconds=0.3, platform="cpu").write(tmp_path / "spec.json")
    t0 = time.perf_counter()
    late = _run_here(tmp_path, 0.01)
    assert time.perf_counter() - t0 < 5
    assert late == {"ok": False, "reason": "it ran past 0 s in this process (which holds the device) and was "
                                           "left to finish; its result is not used"}
    doc = _run_here(tmp_path, 300)
    assert doc["ok"] is True and doc["a_us"] and doc["b_us"], doc.get("reason")
