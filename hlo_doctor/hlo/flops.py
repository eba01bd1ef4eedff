"""FLOPs of one run of an HLO instruction, counted by XLA's cost-analysis conventions.

Two conventions, as XLA's own cost analyses count them:

- ``xla`` (``xla/service/hlo_cost_analysis.cc``, what ``compiled.cost_analysis()`` reports on
  XLA:CPU): an elementwise op does one FLOP per result element, except the transcendental ones
  (``exponential``, ``tanh``, ``power``, ``sine``... :data:`TRANSCENDENTAL`), which XLA counts apart
  and not as FLOPs; ``copy`` and ``concatenate`` none; a fusion's FLOPs are the sum of its fused
  instructions'.
- ``gpu`` (``xla/service/gpu/model/gpu_hlo_cost_analysis.cc``, which xprof's ``hlo_stats`` uses for
  GPU ops): an elementwise op costs, per result element, the clock cycles XLA's op profile measured
  for that (opcode, element type) (:data:`GPU_CYCLES_PER_ELEMENT`), 3 where the profile has no
  entry; transcendental ones included (a ``sine`` of f32 is 662 "FLOPs" per element: these are
  cycle counts, not arithmetic). ``concatenate`` costs 6 per element, 400 when it joins along a
  minor dimension whose first operand is not a multiple of 32 wide. A fusion's FLOPs weight each
  fused instruction by how much of its result the fusion uses (:mod:`hlo_doctor.hlo.cost`).

In both: ``dot`` 2 x result elements x contracted size; ``convolution`` 2 x input features per
group x output features x batch x valid window positions (the same for cuBLAS GEMM and cuDNN
convolution custom calls); ``reduce`` the reducer's FLOPs x (input elements - result elements);
``reduce-window`` the reducer's x (window size - 1) x result elements; ``map`` the mapped
function's x elements; ``scatter`` the combiner's x update elements; ``sort`` n x ceil(log2 n);
all-reduce the reducer's x elements. Ops that move data (slices, ``transpose``, ``broadcast``,
``gather``, ``iota``...) do 0. Unknown (None): other custom calls, ``while``, ``conditional``,
``call``.

xprof's hlo_stats then counts an op with narrow inputs at a fraction of those FLOPs
(:func:`xprof_device_flops`): half for 8-bit inputs (int8, uint8, fp8), a quarter for 4-bit ones,
so that its FLOP rate compares against the 16-bit peak.
"""

from __future__ import annotations

import json
import math
import re
from typing import Literal

import numpy as np

from hlo_doctor.hlo.module import HloInstruction, HloModule
from hlo_doctor.hlo.shape import DTYPE_BITS, HloShape

Convention = Literal["xla", "gpu"]

# Opcodes XLA's HloCostAnalysis prices through HandleElementwiseOp (every unary and binary
# elementwise op, compare, clamp, select, convert, reduce-precision); copy is not one of them.
ELEMENTWISE_FLOPS = frozenset({
    "abs", "acos", "acosh", "add", "and", "asin", "asinh", "atan2", "atanh", "bitcast-convert", "cbrt",
    "ceil", "clamp", "count-leading-zeros", "clz", "compare", "complex", "convert", "cosh", "cosine",
    "divide", "erf", "exponential", "exponential-minus-one", "floor", "imag", "is-finite", "log",
    "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "power",
    "real", "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sinh", "sqrt",
    "stochastic-convert", "subtract", "tan", "tanh", "xor",
})
TRANSCENDENTAL = frozenset({
    "acos", "acosh", "asin", "asinh", "atan2", "atanh", "cbrt", "cosh", "cosine", "erf", "exponential",
    "exponential-minus-one", "log", "log-plus-one", "logistic", "power", "rsqrt", "sine", "sinh", "sqrt",
    "tan", "tanh",
})
"""Elementwise opcodes the ``xla`` convention counts as transcendentals, not FLOPs."""

GPU_DEFAULT_CYCLES = 3
"""Cycles per element of an elementwise op the GPU profile has no entry for (XLA's default)."""
GPU_CYCLES_PER_ELEMENT: dict[str, dict[str, int]] = {
    "add": {"c128": 97, "f64": 97},
    "atan2": {"c128": 39027, "c64": 5353, "f16": 482, "f32": 486, "f64": 3747},
    "cbrt": {"f16": 925, "f32": 867, "f64": 6339},
    "cosine": {"c128": 6613, "f16": 691, "f32": 662, "f64": 1717},
    "divide": {"c128": 7941, "c64": 687, "f64": 2016, "s16": 367, "s32": 306, "s64": 918, "s8": 370,
               "u16": 302, "u32": 115, "u64": 838, "u8": 306},
    "exponential": {"c128": 4028, "c64": 1360, "f16": 108, "f32": 86, "f64": 1652},
    "exponential-minus-one": {"c128": 4161, "c64": 1400, "f16": 396, "f32": 381, "f64": 1900},
    "log": {"c128": 7599, "c64": 950, "f16": 266, "f32": 244, "f64": 608},
    "log-plus-one": {"c128": 6962, "c64": 842, "f16": 284, "f32": 262, "f64": 2073},
    "logistic": {"f16": 226, "f32": 176, "f64": 2412},
    "multiply": {"c128": 270, "f64": 97},
    "power": {"c128": 18205, "c64": 3351, "f16": 975, "f32": 925, "f64": 5511, "s16": 396, "s64": 601,
              "s8": 392, "u16": 399, "u64": 604, "u8": 388},
    "rsqrt": {"c128": 11318, "c64": 2383, "f16": 97, "f32": 75, "f64": 698},
    "sine": {"c128": 5878, "f32": 662, "f64": 1789},
    "sqrt": {"c128": 15606, "c64": 3193, "f16": 97, "f32": 75, "f64": 986},
    "subtract": {"c128": 97, "f64": 97},
    "tanh": {"c128": 9939, "f16": 212, "f32": 190, "f64": 1609},
}
"""Clock cycles per element by (opcode, element type): XLA's ``sm_86`` op profile
(``xla/service/gpu/model/hlo_op_profiles_data.h``), the default profile ``GpuHloCostAnalysis``
takes when built without a device description, as xprof builds it (``XProfGpuCostAnalysis``)."""

# Ops that move or produce data and compute nothing: 0 FLOPs in either convention.
ZERO_FLOPS = frozenset({
    "copy", "slice", "dynamic-slice", "dynamic-update-slice", "bitcast", "reshape", "dynamic-reshape",
    "transpose", "broadcast", "gather", "pad", "reverse", "parameter", "constant", "tuple", "get-tuple-element",
    "copy-start", "copy-done", "iota", "rng", "rng-bit-generator", "rng-get-and-update-state", "after-all",
    "add-dependency", "domain", "opt-barrier", "partition-id", "replica-id", "all-gather", "all-gather-start",
    "all-gather-done", "all-to-all", "collective-permute", "collective-permute-start", "collective-permute-done",
    "collective-broadcast", "send", "send-done", "recv", "recv-done", "infeed", "outfeed", "get-dimension-size",
    "set-dimension-size", "all-reduce-done", "topk",
})
_GEMM_TARGETS = re.compile(r"^__cublas\$(gemm|lt\$matmul)")
_CONV_TARGETS = re.compile(r"^__cudnn\$conv")
_FMA_FLOPS = 2


def elements(shape: HloShape) -> int:
    """Elements of an array, or of all the arrays of a tuple."""
    if shape.is_tuple or shape.is_buffer:
        return sum(elements(e) for e in shape.elements)
    return shape.num_elements


def result_shape(shape: HloShape) -> HloShape:
    """The first array of a tuple result (a custom call's (result, workspace), a variadic reduce)."""
    return shape.elements[0] if shape.is_tuple and shape.elements else shape


def elementwise_flops(opcode: str, shape: HloShape, convention: Convention) -> float:
    """FLOPs of an elementwise op with result ``shape``."""
    if convention == "gpu":
        per = GPU_CYCLES_PER_ELEMENT.get(opcode, {}).get(result_shape(shape).dtype, GPU_DEFAULT_CYCLES)
        return float(per * elements(shape))
    return 0.0 if opcode in TRANSCENDENTAL else float(elements(shape))


def instruction_flops(module: HloModule, inst: HloInstruction, convention: Convention) -> float | None:
    """FLOPs of one run of a non-fusion instruction; None where XLA does not estimate them."""
    op = inst.opcode
    if op in ELEMENTWISE_FLOPS:
        return elementwise_flops(op, inst.shape, convention)
    if op in ZERO_FLOPS:
        return 0.0
    if op in ("dot", "convolution", "custom-call"):
        return matrix_flops(module, inst)
    if op == "concatenate":
        return _concatenate_flops(module, inst) if convention == "gpu" else 0.0
    if op == "sort":
        n = elements(module.operands_of(inst)[0].shape) if inst.operands else 0
        return float(n * math.ceil(math.log2(n))) if n > 1 else 0.0
    times = _applications(module, inst)
    if times is None or not inst.called_computations:
        return None
    per = computation_flops(module, inst.called_computations[-1], convention)
    return None if per is None else per * times


def computation_flops(module: HloModule, name: str, convention: Convention) -> float | None:
    """FLOPs of one run of a called computation (a reducer, a mapped function): its instructions' sum."""
    comp = module.computation(name)
    if comp is None:
        return None
    total = 0.0
    for inst in comp.instructions:
        flops = instruction_flops(module, inst, convention)
        if flops is None:
            return None
        total += flops
    return total


def _applications(module: HloModule, inst: HloInstruction) -> int | None:
    """How many times an op applies its called computation; None for an op not priced this way."""
    op = inst.opcode
    operands = module.operands_of(inst)
    out = elements(result_shape(inst.shape))
    if op == "reduce" and operands:
        return elements(operands[0].shape) - out
    if op == "reduce-window":
        window = _window(inst.attribute("window")).get("size", [])
        size = math.prod(v[0] for v in window if v) if window else 1
        return (size - 1) * out
    if op in ("map", "all-reduce", "all-reduce-start", "reduce-scatter"):
        return elements(inst.shape)
    if op == "scatter" and len(operands) >= 3:
        return elements(operands[(len(operands) - 1) // 2 + 1].shape)
    return None


def _concatenate_flops(module: HloModule, inst: HloInstruction) -> float:
    # XLA's GPU model: a compare and branch per element; a warp that straddles two operands runs
    # both branches, priced at 400 per element so that such a concatenate is not fused into a reduce.
    dims = integers(inst.attribute("dimensions"))
    dim = dims[0] if dims else 0
    operands = module.operands_of(inst)
    first = operands[0].shape.dims if operands else ()
    per = 400 if dim > 0 and dim < len(first) and first[dim] & 31 else 6
    return float(per * elements(inst.shape))


# ---------------------------------------------------------------------------------------------
# Matrix FLOPs
# ---------------------------------------------------------------------------------------------

def integers(text: str) -> list[int]:
    """Every integer in an attribute's text (``{1,0}``, ``3x3``)."""
    return [int(x) for x in re.findall(r"-?\d+", text)]


def _dot_flops(lhs: HloShape, result: HloShape, contracting: list[int]) -> float:
    width = 1
    for d in contracting:
        if 0 <= d < len(lhs.dims):
            width *= lhs.dims[d]
    return float(_FMA_FLOPS * result.num_elements * width)


def _gemm_contracting(inst: HloInstruction) -> list[int] | None:
    """lhs contracting dimensions from a cuBLAS custom call's ``gemm_backend_config``."""
    try:
        config = json.loads(inst.attribute("backend_config") or "{}")
    except ValueError:
        return None
    gemm = config.get("gemm_backend_config", config) if isinstance(config, dict) else {}
    dims = (gemm.get("dot_dimension_numbers") or {}).get("lhs_contracting_dimensions")
    return [int(d) for d in dims] if isinstance(dims, list) else None


def _window(text: str) -> dict[str, list[list[int]]]:
    """``window={size=3x3 stride=2x2 pad=0_1x0_1 lhs_dilate=1x1 rhs_dilate=1x1}`` as lists per field."""
    out: dict[str, list[list[int]]] = {}
    for key, value in re.findall(r"(\w+)=([\d_x-]+)", text):
        out[key] = [integers(part) for part in value.split("x")]
    return out


def _valid_positions(in_size: int, kernel: int, out_size: int, stride: int, pad_low: int,
                     lhs_dilate: int, rhs_dilate: int) -> int:
    """(kernel index, output index) pairs of one spatial dimension that read an input element."""
    outputs = np.arange(out_size, dtype=np.int64)
    count = 0
    for k in range(kernel):
        undilated = outputs * stride - pad_low + k * rhs_dilate
        lhs = undilated // lhs_dilate
        ok = (lhs * lhs_dilate == undilated) & (lhs >= 0) & (lhs < in_size)
        count += int(ok.sum())
    return count


def _conv_flops(inst: HloInstruction, lhs: HloShape, rhs: HloShape, result: HloShape) -> float | None:
    labels = inst.attribute("dim_labels")
    m = re.fullmatch(r"(\w+)_(\w+)->(\w+)", labels)
    if not m:
        return None
    lhs_l, rhs_l, out_l = m.groups()
    if not (len(lhs_l) == len(lhs.dims) and len(rhs_l) == len(rhs.dims) and len(out_l) == len(result.dims)):
        return None
    window = _window(inst.attribute("window"))
    spatial = [c for c in lhs_l if c.isdigit()]
    valid = 1
    for i, c in enumerate(sorted(spatial)):
        def field(name: str, default: int, i: int = i) -> int:
            values = window.get(name)
            return values[i][0] if values and i < len(values) and values[i] else default
        pads = window.get("pad")
        pad_low = pads[i][0] if pads and i < len(pads) and pads[i] else 0
        valid *= _valid_positions(lhs.dims[lhs_l.index(c)], rhs.dims[rhs_l.index(c)], result.dims[out_l.index(c)],
                                  field("stride", 1), pad_low, field("lhs_dilate", 1), field("rhs_dilate", 1))
    groups = max(int(inst.attribute("feature_group_count", "1") or 1), 1)
    batch_groups = max(int(inst.attribute("batch_group_count", "1") or 1), 1)
    fma = (lhs.dims[lhs_l.index("f")] // groups) * result.dims[out_l.index("f")] * \
        (lhs.dims[lhs_l.index("b")] // batch_groups) * valid
    return float(_FMA_FLOPS * fma)


def is_matrix_custom_call(inst: HloInstruction) -> bool:
    """A cuBLAS GEMM or cuDNN convolution custom call (the ones XLA's GPU model prices)."""
    target = inst.attribute("custom_call_target").strip('"')
    return bool(_GEMM_TARGETS.match(target) or _CONV_TARGETS.match(target))


def matrix_flops(module: HloModule, inst: HloInstruction) -> float | None:
    """FLOPs of a dot, convolution, cuBLAS GEMM or cuDNN convolution; None for any other op."""
    operands = [o.shape for o in module.operands_of(inst)]
    if len(operands) < 2:
        return None
    if inst.opcode == "dot":
        return _dot_flops(operands[0], inst.shape, integers(inst.attribute("lhs_contracting_dims")))
    if inst.opcode == "convolution":
        return _conv_flops(inst, operands[0], operands[1], inst.shape)
    if inst.opcode == "custom-call":
        target = inst.attribute("custom_call_target").strip('"')
        if _GEMM_TARGETS.match(target):
            contracting = _gemm_contracting(inst)
            return None if contracting is None else _dot_flops(operands[0], result_shape(inst.shape), contracting)
        if _CONV_TARGETS.match(target):
            return _conv_flops(inst, operands[0], operands[1], result_shape(inst.shape))
    return None


# ---------------------------------------------------------------------------------------------
# xprof's device FLOPs: ops with 8-bit or 4-bit inputs
# ---------------------------------------------------------------------------------------------

# xprof's XProfGpuCostAnalysis (xprof/utils/xprof_gpu_cost_analysis.cc) divides an op's FLOPs by
# the rate its narrow inputs run at against fp16 ("for int8/fp8, 2x flops assumed comparing with
# fp16 flops ... for int4, 4x"): hlo_stats' FLOP rate ("Normalized GFLOP/s"), operational intensity
# and bound-by use these device FLOPs against the fp16/bf16 peak; only its "Model GFLOP/s" keeps
# them whole.
_NARROW_INPUT_DIVISOR = {8: 2, 4: 4}


def _bit_width(shape: HloShape) -> int | None:
    """An operand's element width as xla::primitive_util::BitWidth gives it (``pred`` is 1 bit, not
    its storage byte); None for tuples, tokens and buffers, which xprof's GetInputBitwidths skips."""
    if shape.is_tuple or shape.is_buffer or shape.dtype in ("token", "opaque"):
        return None
    return 1 if shape.dtype == "pred" else DTYPE_BITS.get(shape.dtype)


def narrow_input_divisor(module: HloModule, inst: HloInstruction) -> int:
    """What xprof divides the FLOPs of a top-level op by: 2 when its widest operand is 8 bits
    (``s8``, ``u8``, ``f8e4m3fn``...), 4 when it is 4 bits, else 1. A cuBLAS GEMM custom call goes
    by its first operand (the A matrix); any other custom call (a cuDNN convolution too) keeps its
    FLOPs, as xprof skips custom calls there (``XProfGpuCostAnalysis::Postprocess``)."""
    operands = module.operands_of(inst)
    if inst.opcode == "custom-call":
        if not operands or not _GEMM_TARGETS.match(inst.attribute("custom_call_target").strip('"')):
            return 1
        widths = [_bit_width(operands[0].shape)]
    else:
        widths = [_bit_width(o.shape) for o in operands]
    known = [w for w in widths if w is not None]
    return _NARROW_INPUT_DIVISOR.get(max(known), 1) if known else 1


def xprof_device_flops(module: HloModule, inst: HloInstruction, flops: float) -> float:
    """A top-level op's FLOPs as xprof's hlo_stats counts them on GPU: ``flops`` (XLA's GPU cost
    analysis of the op) less xprof's adjustment for narrow inputs (:func:`narrow_input_divisor`),
    which xprof truncates to an integer: ``flops - trunc(flops - flops / divisor)``."""
    divisor = narrow_input_divisor(module, inst)
    if divisor == 1 or not flops:
        return flops
    return flops - math.trunc(flops - flops / divisor)
