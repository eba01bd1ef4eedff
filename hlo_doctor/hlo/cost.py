"""What one run of an HLO op costs: bytes it moves and FLOPs it does, counted the way XLA's
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

FLOPs: :mod:`hlo_doctor.hlo.flops` prices each instruction by the convention asked for (``xla``:
XLA's generic cost analysis, what ``compiled.cost_analysis()`` reports; ``gpu``: its GPU variant, as
xprof's hlo_stats prices GPU ops). A fusion's FLOPs are its fused instructions' (the ``gpu``
convention weights each by the utilization above; the ``xla`` one counts each in full); None when
one of them has no estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlo_doctor.hlo.flops import Convention, instruction_flops, is_matrix_custom_call, result_shape
from hlo_doctor.hlo.flops import elements as _elements
from hlo_doctor.hlo.flops import integers as _ints
from hlo_doctor.hlo.module import HloComputation, HloInstruction, HloModule

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
_NOT_ESTIMATED = frozenset({"while", "conditional", "call", "async-start", "async-update", "async-done"})
_WARP = 32


@dataclass(frozen=True, slots=True)
class OpCost:
    """One run of an op."""

    bytes_accessed: float | None
    """Bytes read and written (None: not estimated for this opcode)."""
    flops: float | None
    """FLOPs by the convention asked for (None: not estimated, e.g. a custom call XLA does not price)."""


def op_cost(module: HloModule, inst: HloInstruction, convention: Convention = "xla") -> OpCost:
    """The cost of one run of ``inst`` (an op of ``module``'s entry or of any computation); FLOPs by
    ``convention`` (:mod:`hlo_doctor.hlo.flops`)."""
    if inst.opcode == "fusion":
        return _Fusion(module, inst, convention).cost()
    return OpCost(_plain_bytes(module, inst), instruction_flops(module, inst, convention))


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
        if not is_matrix_custom_call(inst):
            return None
        out = result_shape(inst.shape).nbytes
    return float(out + sum(sizes))


# ---------------------------------------------------------------------------------------------
# Fusions
# ---------------------------------------------------------------------------------------------

class _Fusion:
    """One fusion's cost: utilization of each fused instruction, then bytes and FLOPs."""

    def __init__(self, module: HloModule, fusion: HloInstruction, convention: Convention = "xla") -> None:
        self.module, self.fusion, self.convention = module, fusion, convention
        self.body = module.fusion_body(fusion)

    def cost(self) -> OpCost:
        body = self.body
        if body is None:
            return OpCost(_plain_bytes(self.module, self.fusion), None)
        if self.fusion.fusion_kind == "kCustom":
            # A custom fusion around a gather or scatter costs that gather or scatter.
            for inst in body.instructions:
                if inst.opcode in ("gather", "scatter"):
                    return OpCost(_plain_bytes(self.module, inst), instruction_flops(self.module, inst,
                                                                                     self.convention))
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
            nested = _Fusion(self.module, inst, self.convention)
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
        """The fused instructions' FLOPs: weighted by utilization (``gpu``) or each in full (``xla``)."""
        total = 0.0
        for inst in body.instructions:
            if inst.opcode == "fusion":
                flops = _Fusion(self.module, inst, self.convention).cost().flops
            else:
                flops = instruction_flops(self.module, inst, self.convention)
            if flops is None:
                return None
            total += flops * (util.get(inst.name, 0.0) if self.convention == "gpu" else 1.0)
        return total
