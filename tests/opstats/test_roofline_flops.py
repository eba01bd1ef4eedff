"""FLOPs of elementwise ops and reductions, judged from outside the project.

- XLA's generic convention against XLA:CPU's own ``compiled.cost_analysis()``: the FLOPs of every
  op of real compiled programs (fusions of elementwise ops, reductions, an argmax's variadic
  reduce, a sort, a concatenate, a reduce-window), summed over the entry, equal XLA's.
- XLA's GPU convention (what xprof's hlo_stats counts) on the real H200 capture: the 132-byte
  sine fusion costs what XLA's GPU op profile prices its sine and power at, so xprof calls it
  compute-bound; the whole table against xprof's hlo_stats is in test_roofline.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from hlo_doctor.hlo import parse_module
from hlo_doctor.hlo.cost import op_cost
from hlo_doctor.hlo.flops import GPU_CYCLES_PER_ELEMENT, GPU_DEFAULT_CYCLES
from hlo_doctor.opstats import load_opstats

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
X = jnp.linspace(-2.0, 2.0, 64 * 256, dtype=jnp.float32).reshape(64, 256)


def _entry_flops(fn: Callable[..., Any], *args: Any) -> tuple[float, float]:
    """(XLA's FLOPs of the compiled program, hlo-doctor's summed over the entry's ops)."""
    compiled = jax.jit(fn).lower(*args).compile()
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    module = parse_module(compiled.as_text())
    ours = 0.0
    for inst in module.entry.instructions:
        flops = op_cost(module, inst, "xla").flops
        assert flops is not None, f"{inst.name} ({inst.opcode}) has no FLOP count"
        ours += flops
    return float(analysis["flops"]), ours


@pytest.mark.parametrize(("fn", "arg"), [
    (lambda a: jnp.tanh(a) + 1.0, X),  # a transcendental is not a FLOP: 1 add per element
    (lambda a: a.sum(axis=-1), X),
    (lambda a: jnp.argmax(a, axis=-1), X),  # variadic reduce: the reducer's compares and selects
    (lambda a: jax.nn.softmax(a, axis=-1), X),
    (lambda a: a * lax.rsqrt((a * a).mean(-1, keepdims=True) + 1e-6), X),
    (lambda a: a.astype(jnp.float32).max(-1), X.astype(jnp.bfloat16)),
    (lambda a: jnp.where(a > 0, a, 0.0).clip(-1, 1), X),
    (lambda a: jnp.sort(a, axis=-1), X),
    (lambda a: jnp.concatenate([a, a * 2], axis=1), X),
    (lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (1, 3), (1, 1), "VALID"), X),
], ids=["tanh-add", "sum", "argmax", "softmax", "rms-norm", "bf16-widen-max", "where-clip", "sort",
        "concatenate", "reduce-window"])
def test_flops_equal_xla_cpu_cost_analysis(fn: Callable[..., Any], arg: jax.Array) -> None:
    theirs, ours = _entry_flops(fn, arg)
    assert theirs > 0
    assert ours == theirs


def test_h200_sine_fusion_is_priced_by_xla_gpu_op_profile() -> None:
    # loop_sine_fusion (jit_decode_forward, f32[32] from an s32 scalar): per element 3 multiplies
    # and a negate at the profile's default, a power and a sine at their f32 cycle counts; the
    # scalar convert once. 132 bytes moved: 387.66 "FLOP"/byte, past the H200's ridge (222.4).
    stats = load_opstats(SAMPLES / "gpu_h200_original")
    row = stats.table[stats.table["op"] == "loop_sine_fusion"].iloc[0]
    per_element = 4 * GPU_DEFAULT_CYCLES + GPU_CYCLES_PER_ELEMENT["power"]["f32"] + \
        GPU_CYCLES_PER_ELEMENT["sine"]["f32"]
    assert row["flops_per_run"] == 32 * per_element + GPU_DEFAULT_CYCLES == 51171
    assert row["cost_bytes_per_run"] == 132
    assert row["intensity_flop_per_byte"] == pytest.approx(387.6591, rel=1e-6)  # xprof's hlo_stats
    assert row["bound_by"] == "compute"
    # Every op of a GPU capture has a FLOP count now (xprof fills all 39 rows).
    assert stats.table["flops_per_run"].notna().all()


def test_xla_cpu_capture_counts_elementwise_flops() -> None:
    # On XLA:CPU the generic convention: the engine's elementwise and reduce fusions get a FLOP
    # rate, never a bound-by (no peak).
    stats = load_opstats(SAMPLES / "engine_b64_original_a")
    table = stats.table
    assert table["flops_per_run"].notna().all()
    reduces = table[table["category"] == "reduce"]
    assert len(reduces) and (reduces["flop_rate_gflops"] > 0).all()
    assert set(table["bound_by"]) == {""}
