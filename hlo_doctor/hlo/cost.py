"""What one run of an HLO op costs: bytes it moves and FLOPs of its matrix work, counted the way XLA's
cost analysis counts them (``xla/service/hlo_cost_analysis.cc`` and its GPU variant
``gpu_hlo_cost_analysis.cc``, which xprof's hlo_stats uses for GPU ops).

Bytes accessed:

- A plain op reads its operands and writes its result, except where it touches less: a ``slice`` or
  ``dynamic-slice`` reads only the slice, a ``gather`` only the gathered rows, a
  ``dynamic-update-slice`` writes only the update (its buffer is updated in place), ``bitcast``,
  ``get-tuple-element``, ``tuple``, ``parameter`` and ``constant`` move nothing.
- A fusion writes its result (an in-place ``dynamic-update-slice`` root: only the update) and reads
  each parameter as far as the fused computation uses it: utilization flows from the root back to
  the parameters; elementwise ops pass it on unchanged (an operand shared by several elementwise
  users is read once), a slice passes on the fraction it keeps, an in-place update none of the
  buffer it updates. A parameter is read at most once in full. A custom fusion around a gather or
  scatter costs that gather or scatter.
- ``custom-call`` other than cuBLAS GEMMs and cuDNN convolutions, ``while``, ``conditional`` and
  ``call`` are not estimated (None).

FLOPs: the matrix work only, 2 per multiply-add: ``dot`` (2 x result elements x contracted size),
``convolution`` (2 x input features per group x output features x batch x valid window positions),
the same for cuBLAS GEMM and cuDNN convolution custom calls, and the dots and convolutions inside
a fusion (weighted by how much of them the fusion's result uses). An op that only moves data
(``copy``, slices, ``transpose``, ``broadcast``, ``gather``...) does 0 FLOPs. Elementwise arithmetic and
reductions are not counted: an op with such work and no matrix work has no FLOP count (None).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np

from hlo_doctor.hlo.module import HloComputation, HloInstruction, HloModule
from hlo_doctor.hlo.shape import HloShape

# XLA's elementwise opcodes (HloInstruction::IsElementwise): their operands are read where the result is.
_ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "bitcast-convert", "cbrt", "ceil", "clamp", "clz", "compare", "complex",
    "convert", "copy", "cosine", "divide", "erf", "exponential", "exponential-minus-one", "floor", "imag",
    "is-finite", "log", "log-plus-one", "logistic", "map", "maximum", "minimum", "multiply", "negate", "not",
    "or", "popcnt", "power", "real", "reduce-precision", "remainder", "round-nearest-afz",
    "round-nearest-even", "rsqrt", "select", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "sign", "sine", "sqrt", "stochastic-convert", "subtract", "tan", "tanh", "xor",
})
_NO_MEMORY = frozenset({"bitcast", "get-tuple-element", "parameter", "constant", "tuple", "after-all",
                        "add-dependency", "domain", "opt-barrier"})
# Ops that move data and compute nothing: 0 FLOPs in any cost model.
_DATA_MOVEMENT = frozenset({"copy", "slice", "dynamic-slice", "dynamic-update-slice", "bitcast", "reshape",
                            "transpose", "broadcast", "gather", "pad", "reverse", "parameter", "constant", "tuple",
                            "get-tuple-element", "copy-start", "copy-done"})
_NOT_ESTIMATED = frozenset({"while", "conditional", "call", "async-start", "async-update", "async-done"})
_GEMM_TARGETS = re.compile(r"^__cublas\$(gemm|lt\$matmul)")
_CONV_TARGETS = re.compile(r"^__cudnn\$conv")
_WARP = 32
_FMA_FLOPS = 2


@dataclass(frozen=True, slots=True)
class OpCost:
    """One run of an op."""

    bytes_accessed: float | None
    """Bytes read and written (None: not estimated for this opcode)."""
    flops: float | None
    """FLOPs of its dots and convolutions (None: it has none)."""


def op_cost(module: HloModule, inst: HloInstruction) -> OpCost:
    """The cost of one run of ``inst`` (an op of ``module``'s entry or of any computation)."""
    if inst.opcode == "fusion":
        return _Fusion(module, inst).cost()
    flops = _matrix_flops(module, inst)
    if flops is None and inst.opcode in _DATA_MOVEMENT:
        flops = 0.0
    return OpCost(_plain_bytes(module, inst), flops)


def _elements(shape: HloShape) -> int:
    """Elements of an array, or of all the arrays of a tuple."""
    if shape.is_tuple or shape.is_buffer:
        return sum(_elements(e) for e in shape.elements)
    return shape.num_elements


def _result(shape: HloShape) -> HloShape:
    """A custom call's result: the first element of the (result, workspace) tuple it returns."""
    return shape.elements[0] if shape.is_tuple and shape.elements else shape


def _plain_bytes(module: HloModule, inst: HloInstruction) -> float | None:
    op = inst.opcode
    if op in _NO_MEMORY:
        return 0.0
    if op in _NOT_ESTIMATED:
        return None
    operands = module.operands_of(inst)
    sizes = [o.shape.nbytes for o in operands]
    out = inst.shape.nbytes
    if op == "slice":
        return 2.0 * out
    if op == "dynamic-slice":
        return 2.0 * out + (sizes[1] if len(sizes) > 1 else 0)
    if op == "dynamic-update-slice" and len(sizes) > 2:
        return 2.0 * sizes[1] + sizes[2]
    if op == "gather" and len(sizes) > 1:
        return 2.0 * out + sizes[1]
    if op == "scatter" and len(sizes) >= 3:
        n = (len(sizes) - 1) // 2
        return 3.0 * sum(sizes[n + 1:]) + sizes[n]
    if op == "custom-call":
        target = inst.attribute("custom_call_target").strip('"')
        if not (_GEMM_TARGETS.match(target) or _CONV_TARGETS.match(target)):
            return None
        out = _result(inst.shape).nbytes
    return float(out + sum(sizes))


# ---------------------------------------------------------------------------------------------
# Matrix FLOPs
# ---------------------------------------------------------------------------------------------

def _ints(text: str) -> list[int]:
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
        out[key] = [_ints(part) for part in value.split("x")]
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


def _matrix_flops(module: HloModule, inst: HloInstruction) -> float | None:
    """FLOPs of a dot, convolution, cuBLAS GEMM or cuDNN convolution; None for any other op."""
    operands = [o.shape for o in module.operands_of(inst)]
    if len(operands) < 2:
        return None
    if inst.opcode == "dot":
        return _dot_flops(operands[0], inst.shape, _ints(inst.attribute("lhs_contracting_dims")))
    if inst.opcode == "convolution":
        return _conv_flops(inst, operands[0], operands[1], inst.shape)
    if inst.opcode == "custom-call":
        target = inst.attribute("custom_call_target").strip('"')
        if _GEMM_TARGETS.match(target):
            contracting = _gemm_contracting(inst)
            return None if contracting is None else _dot_flops(operands[0], _result(inst.shape), contracting)
        if _CONV_TARGETS.match(target):
            return _conv_flops(inst, operands[0], operands[1], _result(inst.shape))
    return None


# ---------------------------------------------------------------------------------------------
# Fusions
# ---------------------------------------------------------------------------------------------

class _Fusion:
    """One fusion's cost: utilization of each fused instruction, then bytes and FLOPs."""

    def __init__(self, module: HloModule, fusion: HloInstruction) -> None:
        self.module, self.fusion = module, fusion
        self.body = module.fusion_body(fusion)

    def cost(self) -> OpCost:
        body = self.body
        if body is None:
            return OpCost(_plain_bytes(self.module, self.fusion), None)
        if self.fusion.fusion_kind == "kCustom":
            # A custom fusion around a gather or scatter costs that gather or scatter.
            for inst in body.instructions:
                if inst.opcode in ("gather", "scatter"):
                    return OpCost(_plain_bytes(self.module, inst), None)
        written, in_place = self._output_bytes(body)
        util = self._utilizations(body, in_place)
        read = 0.0
        for inst in body.instructions:
            if inst.opcode == "parameter":
                read += self._parameter_bytes(inst, util)
            elif inst.opcode == "constant" and _elements(inst.shape) > 1:
                read += math.floor(inst.shape.nbytes * min(util.get(inst.name, 0.0), 1.0))
        return OpCost(written + read, self._flops(body, util))

    def _output_bytes(self, body: HloComputation) -> tuple[float, set[str]]:
        """Bytes the fusion writes, and the in-place updates whose buffer it does not read."""
        root = body.root
        in_place: set[str] = set()

        def update_size(dus: HloInstruction) -> float:
            in_place.add(dus.name)
            ops = self.module.operands_of(dus)
            return float(ops[1].shape.nbytes) if len(ops) > 1 else float(dus.shape.nbytes)

        if root.opcode == "dynamic-update-slice":
            return update_size(root), in_place
        if root.opcode == "tuple":
            total = 0.0
            for element in self.module.operands_of(root):
                total += update_size(element) if element.opcode == "dynamic-update-slice" else element.shape.nbytes
            return total, in_place
        return float(self.fusion.shape.nbytes), in_place

    def _post_order(self, body: HloComputation) -> list[HloInstruction]:
        """Operands before users, starting from the root (then anything the root does not reach)."""
        order: list[HloInstruction] = []
        seen: set[str] = set()
        for start in [body.root, *body.instructions]:
            if start.name in seen:
                continue
            stack: list[tuple[HloInstruction, int]] = [(start, 0)]
            seen.add(start.name)
            while stack:
                inst, i = stack.pop()
                operands = self.module.operands_of(inst)
                if i < len(operands):
                    stack.append((inst, i + 1))
                    child = operands[i]
                    if child.name not in seen:
                        seen.add(child.name)
                        stack.append((child, 0))
                else:
                    order.append(inst)
        return order

    def _utilizations(self, body: HloComputation, in_place: set[str]) -> dict[str, float]:
        """How much of each fused instruction's result the fusion's result uses (1.0 = all of it),
        propagated from the root as XLA's GPU cost analysis propagates it."""
        util: dict[str, float] = {}
        roots: dict[str, set[str]] = {i.name: set() for i in body.instructions}
        root_util: dict[str, float] = {i.name: 0.0 for i in body.instructions}
        root = body.root
        roots[root.name] = {root.name}
        root_util[root.name] = 1.0
        for inst in reversed(self._post_order(body)):
            u = sum(root_util[r] for r in roots.get(inst.name, ()))
            util[inst.name] = u
            passes_on = inst.opcode in _ELEMENTWISE or inst.opcode in ("tuple", "get-tuple-element")
            for idx, operand in enumerate(self.module.operands_of(inst)):
                if passes_on:
                    roots[operand.name] |= roots[inst.name]
                    continue
                roots[operand.name].add(operand.name)
                share = u * self._operand_share(inst, idx, in_place)
                n = _elements(operand.shape)
                root_util[operand.name] += math.ceil(share * n - 1e-9) / n if n else 0.0
        return util

    def _operand_share(self, inst: HloInstruction, idx: int, in_place: set[str]) -> float:
        """The fraction of operand ``idx`` that ``inst`` reads to produce all of its result."""
        op = inst.opcode
        operands = self.module.operands_of(inst)
        out_n = _elements(inst.shape)
        if op in ("slice", "gather") and idx == 0 or op == "dynamic-slice" and idx == 0:
            n = _elements(operands[0].shape)
            return out_n / n if n else 0.0
        if op == "dynamic-update-slice" and idx == 0:
            if inst.name in in_place:
                return 0.0
            update = _elements(operands[1].shape) if len(operands) > 1 else 0
            return (out_n - update) / out_n if out_n else 0.0
        if op == "concatenate":
            dims = _ints(inst.attribute("dimensions"))
            dim = dims[0] if dims else 0
            size = operands[idx].shape.dims[dim] if dim < len(operands[idx].shape.dims) else 0
            if dim == 0 or size <= 0:
                return 1.0
            # A warp that straddles two operands runs both branches (XLA's GPU model counts it).
            return math.ceil(size / _WARP) * _WARP / size
        if op == "fusion":
            nested = _Fusion(self.module, inst)
            if nested.body is not None:
                _, nested_in_place = nested._output_bytes(nested.body)
                nested_util = nested._utilizations(nested.body, nested_in_place)
                params = nested.body.parameters
                if idx < len(params):
                    return nested_util.get(params[idx].name, 1.0)
        return 1.0

    def _parameter_bytes(self, param: HloInstruction, util: dict[str, float]) -> float:
        if param.shape.is_tuple:
            users = [u for u in self.module.users_of(param) if u.opcode == "get-tuple-element"]
            if users:
                return float(sum(math.floor(u.shape.nbytes * min(util.get(u.name, 0.0), 1.0)) for u in users))
        return float(math.floor(param.shape.nbytes * min(util.get(param.name, 0.0), 1.0)))

    def _flops(self, body: HloComputation, util: dict[str, float]) -> float | None:
        """Matrix FLOPs of the body; 0 when it only moves data; None when it computes other things."""
        total: float | None = None
        arithmetic = False
        for inst in body.instructions:
            if inst.opcode == "fusion":
                flops = _Fusion(self.module, inst).cost().flops
                arithmetic = arithmetic or flops is None
            else:
                flops = _matrix_flops(self.module, inst)
                arithmetic = arithmetic or (flops is None and inst.opcode not in _DATA_MOVEMENT)
            if flops is not None:
                total = (total or 0.0) + util.get(inst.name, 0.0) * flops
        return total if total is not None or arithmetic else 0.0
