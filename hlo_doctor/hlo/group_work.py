"""What an invariant group (:mod:`hlo_doctor.hlo.invariance`) does: real work or data movement only,
one value folded by XLA, random draws."""

from __future__ import annotations

import re
from collections.abc import Iterable

from hlo_doctor.hlo.invariance import InvariantGroup
from hlo_doctor.hlo.module import HloInstruction, HloModule, fused_opcodes

__all__ = ["draws_random", "group_work", "inside", "uniform_constants"]


# jax.random's programs and ops: the threefry hash, rng-bit-generator, the samplers built on them.
_RANDOM = re.compile(r"threefry|random_bits|rng_bit_generator|jit\(_(?:uniform|normal|truncated_normal|"
                     r"bernoulli|randint|gamma)\)|^jit__(?:uniform|normal|truncated_normal|bernoulli|randint)$")


def draws_random(module: HloModule, insts: Iterable[HloInstruction] | None = None) -> bool:
    """True when ``module`` (or the given instructions of it) draws random bits: ``rng-bit-generator``,
    or ``jax.random``'s programs and ops by name (the threefry hash, ``_uniform``, ``_normal``...)."""
    if insts is None:
        if _RANDOM.search(module.name):
            return True
        insts = module.instructions()
    return any(i.opcode in ("rng-bit-generator", "rng") or _RANDOM.search(i.op_name) for i in insts)


# Data movement: what a group must do more than, to be work a one-time preparation removes.
_MOVES = frozenset({
    "bitcast", "reshape", "slice", "dynamic-slice", "broadcast", "get-tuple-element", "tuple", "parameter",
    "constant", "copy", "dynamic-update-slice", "pad", "while", "conditional", "call",
    # Asynchronous copies (a host operand's prefetch) and collectives that only move data.
    "copy-start", "copy-done", "all-gather", "all-gather-start", "all-gather-done", "all-to-all",
    "collective-permute", "collective-permute-start", "collective-permute-done", "send", "send-done",
    "recv", "recv-done", "async-start", "async-update", "async-done",
})

# Leaves whose values differ from element to element: a group of constants without any of these
# (a chain of elementwise ops on broadcast scalars) holds one value, which XLA folds to a constant.
_VARYING_LEAVES = frozenset({"iota", "rng", "rng-bit-generator", "replica-id", "partition-id", "custom-call"})


def uniform_constants(m: HloModule, g: InvariantGroup) -> bool:
    """True when a group of constants only (no weights) computes one value broadcast: no iota, random
    bits, device id or custom call inside it and only scalar constants. Optimized HLO from XLA never
    holds such a chain (constant folding removes it), so it is hand-written test input, not waste."""
    if g.parameters:
        return False
    for i in (j for op in g.ops for j in inside(m, op)):
        nested = m.fusion_body(i)
        inner = nested.instructions if nested is not None else (i,)
        for k in inner:
            if k.opcode in _VARYING_LEAVES:
                return False
            if k.opcode == "constant" and k.shape.dims:
                return False
    return True


def inside(m: HloModule, inst: HloInstruction) -> tuple[HloInstruction, ...]:
    """The instructions a fusion runs (its body's), or the instruction itself."""
    body = m.fusion_body(inst)
    return body.instructions if body is not None else (inst,)


def does_work(m: HloModule, inst: HloInstruction) -> bool:
    """Whether ``inst`` does more than move data (:func:`group_work` of it alone is not empty): the
    slice a loop takes of a stacked weight each iteration only moves it."""
    if any(o not in _MOVES for o in fused_opcodes(m, inst)):
        return True
    for i in inside(m, inst):
        ops = m.operands_of(i)
        if i.opcode == "copy" and ops and ops[0].shape.minor_to_major != i.shape.minor_to_major:
            return True
    return False


def group_work(m: HloModule, g: InvariantGroup, min_bytes: int = 0) -> frozenset[str]:
    """What a group's ops of ``min_bytes`` or more do beyond moving data: their opcodes other than
    data movement, plus ``transpose`` for a ``copy`` that changes the layout (a physical transpose).
    (A loop counter's ``add`` beside a weight's slice is not work on the weight.)"""
    big = [i for i in g.ops if i.shape.nbytes >= min_bytes]
    out = {o for i in big for o in fused_opcodes(m, i) if o not in _MOVES}
    for i in (j for op in big for j in inside(m, op)):
        ops = m.operands_of(i)
        if i.opcode == "copy" and ops and ops[0].shape.minor_to_major != i.shape.minor_to_major:
            out.add("transpose")
    return frozenset(out)
