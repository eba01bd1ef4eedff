"""Slices of results: a matmul whose every use reads only part of what it computed.

``(h @ W)[:, -1]`` computes the LM head for every position and keeps one: the slice is often fused
into the consumer (an argmax fusion reading the dot's output through a ``slice`` inside it), so the
waste shows only by following each use of the producer, across fusion boundaries, to what it
actually reads. Inside a fusion, elementwise work between the parameter and the slice is computed
only where the slice reads it (XLA fuses per output element), so it does not read the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_doctor.hlo import HloInstruction, HloModule
from hlo_doctor.hlo.navigation import callers

__all__ = ["ELEMENTWISE", "PartialRead", "is_matmul_op", "partial_read"]

# Ops that compute each output element from the same element of their operands: between a fusion
# parameter and a slice, they are evaluated only where the slice reads.
ELEMENTWISE = frozenset({
    "convert", "add", "subtract", "multiply", "divide", "maximum", "minimum", "negate", "abs", "exponential",
    "log", "log-plus-one", "exponential-minus-one", "tanh", "logistic", "sqrt", "rsqrt", "power", "select",
    "compare", "clamp", "and", "or", "not", "xor", "sign", "floor", "ceil", "round-nearest-even",
    "round-nearest-afz", "is-finite", "reduce-precision", "cosine", "sine", "erf", "cbrt", "remainder", "atan2",
})
# Ops that only move a value: every element is still there, none is computed.
_MOVE = frozenset({"bitcast", "reshape", "copy", "transpose"})
_MATMUL = frozenset({"dot", "convolution"})
_GEMM_TARGETS = ("gemm", "matmul", "cublas", "dot")
_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class PartialRead:
    """A producer whose uses together read ``kept`` of its ``total`` elements."""

    producer: HloInstruction
    """The level op computing the result (a dot, a convolution, a fusion holding one)."""
    total: int
    kept: int
    reads: tuple[HloInstruction, ...]
    """The slices (``slice``, ``dynamic-slice``, ``gather``) that read it, wherever they are fused."""

    @property
    def kept_fraction(self) -> float:
        return min(1.0, self.kept / self.total) if self.total else 1.0


def is_matmul_op(module: HloModule, op: HloInstruction) -> bool:
    """A dot or convolution, a library matmul call, or a fusion holding one."""
    if op.opcode in _MATMUL:
        return True
    if op.opcode == "custom-call":
        target = op.attribute("custom_call_target").lower()
        return any(t in target for t in _GEMM_TARGETS)
    body = module.fusion_body(op)
    if body is None:
        return False
    seen: set[str] = set()
    stack = [body]
    while stack:
        comp = stack.pop()
        if comp.name in seen:
            continue
        seen.add(comp.name)
        for i in comp.instructions:
            if i.opcode in _MATMUL:
                return True
            nested = module.fusion_body(i)
            if nested is not None:
                stack.append(nested)
    return False


def _result(module: HloModule, op: HloInstruction) -> tuple[HloInstruction, int | None] | None:
    """(value to follow, tuple index wanted) for a producer: a matmul call returns (result, workspace)."""
    if not op.shape.is_tuple:
        return op, None
    if op.opcode == "custom-call" and op.shape.elements and not op.shape.elements[0].is_tuple:
        return op, 0
    return None


def partial_read(module: HloModule, op: HloInstruction) -> PartialRead | None:
    """How much of level op ``op``'s result its uses read, when every use reads only a slice of it.

    None when some use reads it whole (real work outside a fusion, the program's output, a loop's
    state, a fusion output that is not behind a slice) or when nothing slices it.
    """
    start = _result(module, op)
    if start is None:
        return None
    value, index = start
    shape = op.shape.elements[index] if index is not None else op.shape
    total = shape.num_elements
    kept = 0
    reads: list[HloInstruction] = []
    stack: list[tuple[HloInstruction, int | None]] = [(value, index)]
    seen: set[tuple[str, str]] = set()
    while stack:
        v, want = stack.pop()
        key = (v.computation, v.name)
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > _LIMIT:
            return None
        comp = module.computation(v.computation)
        if comp is not None and comp.root.name == v.name and v is not value:
            return None  # a fusion or computation result: written whole
        if v is value and module.is_live_out(v):
            return None
        for u in module.users_of(v):
            if want is not None:
                if u.opcode != "get-tuple-element":
                    return None
                if int(u.attribute("index", "0") or 0) == want:
                    stack.append((u, None))
                continue
            if u.opcode in _MOVE:
                stack.append((u, None))
            elif u.opcode in ("slice", "dynamic-slice") and u.operands and u.operands[0] == v.name:
                kept += u.shape.num_elements
                reads.append(u)
            elif u.opcode == "gather" and u.operands and u.operands[0] == v.name:
                kept += min(u.shape.num_elements, total)
                reads.append(u)
            elif u.opcode == "fusion":
                body = module.fusion_body(u)
                if body is None:
                    return None
                params = body.parameters
                for i, name in enumerate(u.operands):
                    if name == v.name and i < len(params):
                        stack.append((params[i], None))
            elif u.opcode in ELEMENTWISE and _in_fusion(module, u) and u.shape.num_elements == v.shape.num_elements:
                stack.append((u, None))
            else:
                return None
    if not reads:
        return None
    return PartialRead(op, total, kept, tuple(reads))


def _in_fusion(module: HloModule, inst: HloInstruction) -> bool:
    caller = callers(module).get(inst.computation)
    return caller is not None and caller.opcode == "fusion"
