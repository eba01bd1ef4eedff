"""Analyses of parsed HLO that the rules (and ``verify``) share; they need HLO only, no timings.

This module holds value flow through fusions, tuples and data movement, exact widening converts and
the programs that do nothing else; it re-exports :mod:`~hlo_doctor.hlo.navigation` (callers, entry
ops, the instruction that matters in a fusion) and :mod:`~hlo_doctor.hlo.reductions` (order-invariant
reductions, what an argmax reads), so that a rule imports its HLO analyses from one place. What
needs op timings (pairing a convert program with the program it feeds by how often both run) lives
in :mod:`hlo_doctor.lint`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hlo_doctor.hlo import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    HloInstruction,
    HloModule,
    HloShape,
    is_convert_only,
    real_work,
)
from hlo_doctor.hlo.navigation import callers, dtype_shape, entry_op, entry_parameter_of, key_instruction
from hlo_doctor.hlo.reductions import (
    HasModules,
    TimedModules,
    argmax_reads,
    argmax_times,
    is_argmax_program,
    reads_partials,
    reduce_inputs,
    selection_reduce_kind,
    selection_reduces,
)

# Data movement commutes with an elementwise convert: a value passing through these is the same
# value for the question "could this have stayed narrow?".
PASS_THROUGH_OPCODES = frozenset({
    "bitcast", "reshape", "copy", "transpose", "broadcast", "slice", "get-tuple-element", "tuple",
    "dynamic-slice", "copy-start", "copy-done", "optimization-barrier", "opt-barrier",
})


# -------------------------------------------------------------------------------------------------
# Widening converts and where a value ends up
# -------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ValueUse:
    """Where a value ends up: an order-invariant reduce, the program's output, or anything else."""

    kind: str
    """``reduce``, ``output`` or ``other``."""
    inst: HloInstruction


def is_exact_widening(src: str, dst: str) -> bool:
    """True when converting ``src`` to ``dst`` is exact (a wider float type holds every value)."""
    if src not in FLOAT_DTYPES or dst not in FLOAT_DTYPES or src == dst:
        return False
    if {src, dst} == {"f16", "bf16"}:
        return False  # neither holds the other
    return DTYPE_BYTES.get(dst, 0) > DTYPE_BYTES.get(src, 0)


def value_uses(module: HloModule, value: HloInstruction) -> list[ValueUse]:
    """Where ``value`` ends up, following data movement, fusion boundaries and the ROOT.

    Tuples are followed as a whole (an over-approximation): more uses means fewer findings.
    """
    by_comp = callers(module)
    out: list[ValueUse] = []
    stack = [value]
    seen: set[tuple[str, str]] = set()
    while stack:
        v = stack.pop()
        key = (v.computation, v.name)
        if key in seen:
            continue
        seen.add(key)
        comp = module.computation(v.computation)
        if comp is not None and comp.root.name == v.name:
            if v.computation == module.entry_name:
                out.append(ValueUse("output", v))
            else:
                caller = by_comp.get(v.computation)
                if caller is not None and caller.opcode == "fusion":
                    stack.append(caller)
                else:
                    out.append(ValueUse("other", caller or v))
        for u in module.users_of(v):
            if u.opcode in PASS_THROUGH_OPCODES:
                stack.append(u)
            elif u.opcode == "fusion":
                body = module.fusion_body(u)
                params = body.parameters if body is not None else []
                for idx, op in enumerate(u.operands):
                    if op == v.name and idx < len(params):
                        stack.append(params[idx])
            elif selection_reduce_kind(module, u) and v.name in reduce_inputs(u):
                out.append(ValueUse("reduce", u))
            else:
                out.append(ValueUse("other", u))
    return out


def only_reaches_selection(uses: Sequence[ValueUse]) -> bool:
    """True when the value reaches at least one order-invariant reduce and otherwise only outputs."""
    return any(u.kind == "reduce" for u in uses) and all(u.kind in ("reduce", "output") for u in uses)


def widening_convert_of(module: HloModule, inst: HloInstruction) -> tuple[str, str] | None:
    """(narrow dtype, wide dtype) when ``inst`` is an exact widening convert (bare or wrapped)."""
    if not (inst.opcode == "convert" or (inst.opcode == "fusion" and is_convert_only(module, inst))):
        return None
    ops = module.operands_of(inst)
    if len(ops) != 1:
        return None
    src, dst = ops[0].shape.dtype, inst.shape.dtype
    return (src, dst) if is_exact_widening(src, dst) else None


@dataclass(frozen=True, slots=True)
class ConvertProgram:
    """A module whose only real work is one widening convert (an eager ``astype``)."""

    module: HloModule
    op: HloInstruction
    """The entry-level op doing the convert (``convert_element_type.1``, ``wrapped_convert``)."""
    convert: HloInstruction
    """The convert instruction itself (inside the fusion on XLA:CPU), for its metadata."""
    narrow: str
    shape: HloShape
    """The widened result."""


def convert_programs(modules: Iterable[HloModule]) -> list[ConvertProgram]:
    """Modules whose entry does nothing but one exact widening convert."""
    out: list[ConvertProgram] = []
    for m in modules:
        work = [i for i in m.entry.instructions if real_work(i)]
        if len(work) != 1:
            continue
        op = work[0]
        widen = widening_convert_of(m, op)
        if widen is None or op.shape.is_tuple:
            continue
        body = m.fusion_body(op)
        convert = next((i for i in body.instructions if i.opcode == "convert"), op) if body else op
        out.append(ConvertProgram(m, op, convert, widen[0], op.shape))
    return out


def fusion_read_of(module: HloModule, op: HloInstruction, inner: HloInstruction) -> HloInstruction | None:
    """The entry-level operand of ``op`` that feeds ``inner``'s first data input, or None.

    ``op`` is an entry-level op: ``inner`` itself, or a fusion containing ``inner``. Walks back
    through data movement inside the fusion; returns None when the walk meets real work (including
    a convert: then the fusion reads the narrow value and widens in registers).
    """
    if op is inner:
        ops = module.operands_of(inner)
        return ops[0] if ops else None
    cur = module.instruction(reduce_inputs(inner)[0], inner.computation)
    while cur is not None:
        if cur.opcode == "parameter":
            comp = module.computation(cur.computation)
            caller = next((i for i in module.instructions()
                           if comp is not None and comp.name in i.called_computations[:1]
                           and i.opcode == "fusion"), None)
            if caller is None or cur.parameter_number is None:
                return None
            outer = module.instruction(caller.operands[cur.parameter_number], caller.computation)
            if caller is op or outer is None:
                return outer
            cur = outer
            continue
        if cur.opcode in PASS_THROUGH_OPCODES and cur.operands:
            cur = module.instruction(cur.operands[0], cur.computation)
            continue
        return None
    return None


__all__ = [
    "PASS_THROUGH_OPCODES", "ConvertProgram", "HasModules", "TimedModules", "ValueUse", "argmax_reads",
    "argmax_times", "callers", "convert_programs", "dtype_shape", "entry_op", "entry_parameter_of", "fusion_read_of",
    "is_argmax_program", "is_exact_widening", "key_instruction", "only_reaches_selection", "reads_partials",
    "reduce_inputs", "selection_reduce_kind", "selection_reduces", "value_uses", "widening_convert_of",
]
