"""Ops with 8-bit inputs in the roofline, judged by xprof's own hlo_stats.

xprof counts an op whose widest input is 8 bits (int8, uint8, fp8) at half its FLOPs on GPU
(``utils/xprof_gpu_cost_analysis.cc``): its "Normalized GFLOP/s", operational intensity and bound-by
use the halved count against the 16-bit peak, its "Model GFLOP/s" the whole one. The capture is a
CUPTI plane (:mod:`xspace_builder`) running real modules compiled on CPU: int8 dots and an int8
convolution (``s8`` operands into a dot/convolution fusion), an fp8 dot (XLA:CPU converts the
``f8e4m3fn`` operands in their own fusions first), a ``u8`` add, and ops that are not 8-bit (a
``pred`` and, an ``s8`` x ``f32`` fusion, an f32 layer). xprof converts a copy of the capture.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from test_roofline import assert_peaks_match, assert_roofline_matches, xprof_hlo_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))

from xspace_builder import GpuDevice, RealModule, SpaceBuilder, compile_module  # noqa: E402

from hlo_doctor.hlo import HloModule, parse_module  # noqa: E402
from hlo_doctor.hlo.cost import op_cost  # noqa: E402
from hlo_doctor.hlo.flops import narrow_input_divisor  # noqa: E402
from hlo_doctor.opstats import OpStats, load_opstats  # noqa: E402

Spec = jax.ShapeDtypeStruct


def _int_dot(a: jax.Array, b: jax.Array) -> jax.Array:
    return jax.lax.dot(a, b, preferred_element_type=jnp.int32)


def _float_dot(a: jax.Array, b: jax.Array) -> jax.Array:
    return jax.lax.dot(a, b, preferred_element_type=jnp.float32)


def _int_conv(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                        preferred_element_type=jnp.int32)


def _layer(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w) + 1.0


# (program id, function, argument specs, whether xprof halves the module's ops' FLOPs by op name).
PROGRAMS: tuple[tuple[int, Any, tuple[Spec, ...], dict[str, bool]], ...] = (
    (301, _int_dot, (Spec((64, 128), jnp.int8), Spec((128, 256), jnp.int8)), {"ynn_fusion": True}),
    # 2 x 1024^3 FLOPs over 6 MiB: 341 FLOP/byte whole, past the H200's ridge (222.4); 171 halved.
    (302, _int_dot, (Spec((1024, 1024), jnp.int8), Spec((1024, 1024), jnp.int8)), {"ynn_fusion": True}),
    (303, _int_conv, (Spec((8, 16, 16, 32), jnp.int8), Spec((3, 3, 32, 64), jnp.int8)), {"ynn_fusion": True}),
    (304, _float_dot, (Spec((64, 128), jnp.float8_e4m3fn), Spec((128, 256), jnp.float8_e4m3fn)),
     {"wrapped_convert": True, "wrapped_convert.1": True, "ynn_fusion": False}),
    (305, lambda a, b: a + b, (Spec((64, 128), jnp.uint8),) * 2, {"wrapped_add": True}),
    (306, jnp.logical_and, (Spec((64, 128), jnp.bool_),) * 2, {"wrapped_and": False}),
    (307, lambda a, b: a * b + 1, (Spec((64, 128), jnp.int8), Spec((64, 128), jnp.float32)),
     {"broadcast_add_fusion": False}),
    (308, _layer, (Spec((8, 32), jnp.float32), Spec((32, 32), jnp.float32)),
     {"ynn_fusion": False, "broadcast_add_fusion": False}),
)


Program = tuple[int, RealModule, HloModule, dict[str, bool]]


@pytest.fixture(scope="module")
def programs() -> list[Program]:
    out = []
    for pid, fn, specs, halved in PROGRAMS:
        module = compile_module(fn, *specs)
        assert {op.name for op in module.ops} == set(halved), f"{module.name}: XLA:CPU printed {module.ops}"
        out.append((pid, module, parse_module(jax.jit(fn).lower(*specs).compile().as_text()), halved))
    return out


def _capture(root: Path, programs: list[Program]) -> Path:
    space = SpaceBuilder()
    for pid, module, _, _ in programs:
        space.add_module(module, pid)
    gpu = GpuDevice(space, 0)
    gpu.builder.plane_stats(memory_bandwidth=4_814_304_000_000)  # the real H200 capture's
    t = 0.0
    for _ in range(2):
        for pid, module, _, _ in programs:
            for k, op in enumerate(module.ops):
                duration = (3.0 + 4 * k) * 1000
                gpu.kernel(module, pid, op.name, t, duration)
                t += duration + 1_000
    return space.write(root / "run")


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory, programs: list[Program]) -> tuple[OpStats, dict[Any, Any], Path]:
    workdir = tmp_path_factory.mktemp("eight_bit")
    xplane = _capture(workdir, programs)
    return load_opstats(xplane), xprof_hlo_stats([xplane], workdir), xplane


def test_eight_bit_rows_equal_xprof(judged: tuple[OpStats, dict[Any, Any], Path], tmp_path: Path) -> None:
    stats, expected, xplane = judged
    assert_peaks_match(stats, [xplane], tmp_path)
    assert stats.peaks is not None and stats.peaks.ridge_flop_per_byte is not None
    compared = assert_roofline_matches(stats, expected, ridge=stats.peaks.ridge_flop_per_byte)
    assert compared["bw"] == compared["flops"] == compared["bound"] == len(stats.table) == len(expected) == 11


def test_xprof_halves_only_ops_whose_widest_input_is_8_bits(judged: tuple[OpStats, dict[Any, Any], Path],
                                                             programs: list[Program]) -> None:
    stats, expected, _ = judged
    rows = {(int(r["program_id"]), str(r["op"])): r for r in stats.table.to_dict(orient="records")}
    for pid, _, parsed, halved in programs:
        for op, half in halved.items():
            cell, row = expected[(pid, op)], rows[(pid, op)]
            model, normalized = float(cell["model_flop_rate"]), float(cell["normalized_flop_rate"])
            # xprof's own columns say which ops it halves: model FLOP rate twice the normalized one.
            assert model == pytest.approx(normalized * (2 if half else 1), rel=1e-6), (pid, op)
            whole = op_cost(parsed, parsed.instruction(op), "gpu").flops
            assert whole is not None and whole > 0
            assert narrow_input_divisor(parsed, parsed.instruction(op)) == (2 if half else 1)
            assert row["flops_per_run"] == (whole / 2 if half else whole), (pid, op)
            assert row["flop_rate_gflops"] == pytest.approx(normalized, rel=1e-6), (pid, op)


def test_halving_moves_an_int8_dot_below_the_ridge(judged: tuple[OpStats, dict[Any, Any], Path]) -> None:
    # Whole, the 1024^3 int8 dot would be compute-bound (341 FLOP/byte); xprof says HBM, at 171.
    stats, expected, _ = judged
    row = stats.table[(stats.table["program_id"] == 302)].iloc[0]
    assert stats.peaks is not None and stats.peaks.ridge_flop_per_byte is not None
    assert row["intensity_flop_per_byte"] == pytest.approx(1024 / 6, rel=1e-9)
    assert 2 * row["intensity_flop_per_byte"] > stats.peaks.ridge_flop_per_byte > row["intensity_flop_per_byte"]
    assert row["bound_by"] == "memory" and expected[(302, "ynn_fusion")]["bound_by"] == "HBM"
    assert not math.isnan(row["pct_of_peak_flops"])
