"""Analyses of parsed HLO that the rules (and ``verify``) share; they need HLO only, no timings.

Value flow through fusions, tuples and data movement; order-invariant (selection) reductions;
exact widening converts and the programs that do nothing else. What needs op timings (pairing a
convert program with the program it feeds by how often both run) lives in :mod:`hlo_doctor.lint`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hlo_doctor.hlo import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    HloInstruction,
    HloModule,
    HloShape,
    is_convert_only,
    real_work,
)

# Data movement commutes with an elementwise convert: a value passing through these is the same
# value for the question "could this have stayed narrow?".
PASS_THROUGH_OPCODES = frozenset({
    "bitcast", "reshape", "copy", "transpose", "broadcast", "slice", "get-tuple-element", "tuple",
    "dynamic-slice", "copy-start", "copy-done", "optimization-barrier", "opt-barrier",
})
# A reducer made only of these selects one of its inputs: max, min, argmax, argmin. Its result does
# not depend on the precision of an exact widening. ``convert`` is allowed because XLA:CPU widens
# bf16 inside reducers itself.
_SELECTION_OPCODES = frozenset({
    "maximum", "minimum", "compare", "select", "and", "or", "not", "convert", "parameter", "tuple",
    "constant",
})


# -------------------------------------------------------------------------------------------------
# Navigation
# -------------------------------------------------------------------------------------------------

# Callers per module, memoised. The module itself is kept beside its index so an id is never
# reused while its entry lives; the memo is bounded (modules of a few runs).
_CALLERS: dict[int, tuple[HloModule, dict[str, HloInstruction]]] = {}
_CALLERS_MAX = 256


def callers(module: HloModule) -> dict[str, HloInstruction]:
    """Computation name -> the instruction that calls it (fusion, reduce, while...)."""
    hit = _CALLERS.get(id(module))
    if hit is not None and hit[0] is module:
        return hit[1]
    out: dict[str, HloInstruction] = {}
    for inst in module.instructions():
        for c in inst.called_computations:
            out.setdefault(c, inst)
    if len(_CALLERS) >= _CALLERS_MAX:
        _CALLERS.pop(next(iter(_CALLERS)))
    _CALLERS[id(module)] = (module, out)
    return out


def entry_op(module: HloModule, inst: HloInstruction) -> HloInstruction:
    """The entry-computation instruction that executes ``inst`` (itself, or its outer fusion)."""
    by_comp = callers(module)
    cur = inst
    seen: set[str] = set()
    while cur.computation != module.entry_name and cur.computation not in seen:
        seen.add(cur.computation)
        caller = by_comp.get(cur.computation)
        if caller is None:
            break
        cur = caller
    return cur


def dtype_shape(shape: HloShape) -> str:
    """``f32[512,256000]`` (no layout)."""
    return shape.text(with_layout=False)


def entry_parameter_of(module: HloModule, value: HloInstruction) -> tuple[HloInstruction, HloShape] | None:
    """(entry parameter, shape of the part reached) that ``value`` is, unchanged; None when any
    computation touches it (the part is an element when the parameter is a tuple).

    Follows what only moves a value around: ``bitcast``, ``get-tuple-element`` of a ``tuple``
    (to the tuple's operand), of a fusion whose body passes one of its parameters through to that
    output (XLA:GPU's multi-output fusions), and of a tuple-shaped entry parameter. XLA:GPU writes
    the aliasing copy as ``copy(get-tuple-element(tuple(..., parameter)))``, XLA:CPU and TPU as
    ``copy(parameter)``.
    """
    cur: HloInstruction | None = value
    index: int | None = None  # tuple element wanted from ``cur`` (a pending get-tuple-element)
    for _ in range(64):  # a chain of plumbing is short; the bound guards against malformed input
        if cur is None:
            return None
        if cur.opcode == "parameter":
            if cur.computation == module.entry_name:
                if index is None:
                    return cur, cur.shape
                elements = cur.shape.elements
                return (cur, elements[index]) if index < len(elements) else None
            # A fusion parameter: continue at the fusion's operand (only inside a pass-through walk).
            caller = callers(module).get(cur.computation)
            if caller is None or caller.opcode != "fusion" or cur.parameter_number is None:
                return None
            if cur.parameter_number >= len(caller.operands):
                return None
            cur = module.instruction(caller.operands[cur.parameter_number], caller.computation)
            continue
        if cur.opcode == "bitcast" and index is None and cur.operands:
            cur = module.instruction(cur.operands[0], cur.computation)
            continue
        if cur.opcode == "get-tuple-element" and index is None and cur.operands:
            index = int(cur.attribute("index", "0") or 0)
            cur = module.instruction(cur.operands[0], cur.computation)
            continue
        if cur.opcode == "tuple" and index is not None:
            if index >= len(cur.operands):
                return None
            cur, index = module.instruction(cur.operands[index], cur.computation), None
            continue
        if cur.opcode == "fusion" and index is not None:
            body = module.fusion_body(cur)
            if body is None or body.root.opcode != "tuple" or index >= len(body.root.operands):
                return None
            cur, index = module.instruction(body.root.operands[index], body.name), None
            continue
        return None
    return None


# Work that dominates a fusion's cost, most expensive kind first: the op "that matters" inside it.
_HEAVY_OPCODES = (
    frozenset({"custom-call", "dot", "convolution", "fft", "triangular-solve", "cholesky"}),
    frozenset({"reduce", "reduce-window", "select-and-scatter", "scatter", "gather", "sort", "topk"}),
)


def key_instruction(module: HloModule, op: HloInstruction) -> HloInstruction:
    """The instruction that matters inside a fusion ``op`` (``op`` itself for anything else).

    The fusion's own metadata is its root's (often a framework helper's line); the op that
    costs is the heaviest inside: a dot or custom call, else a reduction, scatter or gather, else
    the real work with the largest result. Ties go to an instruction with a source line.
    """
    body = module.fusion_body(op)
    if body is None:
        return op
    inner: list[HloInstruction] = []
    stack = [body]
    seen: set[str] = set()
    while stack:
        comp = stack.pop()
        if comp.name in seen:
            continue
        seen.add(comp.name)
        for i in comp.instructions:
            nested = module.fusion_body(i)
            if nested is not None:
                stack.append(nested)
            elif real_work(i):
                inner.append(i)
    if not inner:
        return op
    for kinds in _HEAVY_OPCODES:
        heavy = [i for i in inner if i.opcode in kinds]
        if heavy:
            inner = heavy
            break
    return max(inner, key=lambda i: (i.shape.nbytes, bool(i.source)))


# -------------------------------------------------------------------------------------------------
# Widening converts and order-invariant reductions
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


def selection_reduce_kind(module: HloModule, inst: HloInstruction) -> str:
    """``argmax``/``argmin``/``max``/``min``/``top-k`` for an order-invariant reduction, else ``""``."""
    if inst.opcode == "topk" or (inst.opcode == "custom-call" and "topk" in
                                 inst.attribute("custom_call_target").lower()):
        return "top-k"
    if inst.opcode != "reduce" or not inst.called_computations:
        return ""
    reducer = module.computation(inst.called_computations[0])
    if reducer is None:
        return ""
    ops = {i.opcode for i in reducer.instructions}
    if not ops <= _SELECTION_OPCODES:
        return ""
    n_inputs = len(inst.operands) // 2
    if n_inputs >= 2:
        gt = any(i.opcode == "compare" and i.attribute("direction") in ("GT", "GE")
                 for i in reducer.instructions)
        return "argmax" if gt else "argmin"
    if "maximum" in ops:
        return "max"
    if "minimum" in ops:
        return "min"
    return ""


def reduce_inputs(inst: HloInstruction) -> tuple[str, ...]:
    """The data operands of a reduce (the first half; the rest are init values)."""
    if inst.opcode == "reduce":
        return inst.operands[: max(1, len(inst.operands) // 2)]
    return inst.operands[:1]


def selection_reduces(module: HloModule) -> Iterator[tuple[HloInstruction, HloInstruction, str]]:
    """(entry op, reduce, kind) for every order-invariant reduce of the module."""
    for inst in module.instructions():
        kind = selection_reduce_kind(module, inst)
        if kind:
            yield entry_op(module, inst), inst, kind


def is_argmax_program(module: HloModule) -> bool:
    """True when the module holds an argmax/argmin (a greedy sampler)."""
    return any(k in ("argmax", "argmin") for _, _, k in selection_reduces(module))


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


# -------------------------------------------------------------------------------------------------
# What an argmax reads (verify's check of a treatment)
# -------------------------------------------------------------------------------------------------

class HasModules(Protocol):
    """Anything holding parsed modules (a lint ``Context``)."""

    @property
    def modules(self) -> Sequence[HloModule]: ...


class TimedModules(HasModules, Protocol):
    """Modules plus per-op timings (a lint ``Context`` with op stats)."""

    def op_timing(self, module: HloModule, op: str) -> Any: ...


def reads_partials(module: HloModule, reduce: HloInstruction) -> bool:
    """True when ``reduce`` is a later stage of a multi-stage reduction: its data input is the
    result of another order-invariant reduce (XLA:GPU reduces [64,256000] to [64,256] partials,
    then the partials to [64]). Such a stage reads partials, not the tensor the program widened.
    """
    data = reduce_inputs(reduce)
    cur = module.instruction(data[0], reduce.computation) if data else None
    # Tuple indices still to apply, innermost last: a multi-output fusion's partials reach the next
    # stage through get-tuple-element(get-tuple-element(fusion)) when the fusion also writes
    # another output (the float32 logits beside the argmax partials, say).
    indices: list[int] = []
    for _ in range(64):
        if cur is None:
            return False
        if selection_reduce_kind(module, cur):
            return True
        if cur.opcode == "parameter":
            caller = callers(module).get(cur.computation)
            if caller is None or caller.opcode != "fusion" or cur.parameter_number is None \
                    or cur.parameter_number >= len(caller.operands):
                return False
            cur = module.instruction(caller.operands[cur.parameter_number], caller.computation)
        elif cur.opcode in ("bitcast", "reshape", "copy") and cur.operands:
            cur = module.instruction(cur.operands[0], cur.computation)
        elif cur.opcode == "get-tuple-element" and cur.operands:
            indices.append(int(cur.attribute("index", "0") or 0))
            cur = module.instruction(cur.operands[0], cur.computation)
        elif cur.opcode == "fusion":
            body = module.fusion_body(cur)
            if body is None:
                return False
            root = body.root
            if indices and root.opcode == "tuple" and indices[-1] < len(root.operands):
                cur = module.instruction(root.operands[indices.pop()], body.name)
            else:
                cur = root  # a multi-output reduce is the root itself, its tuple index kept
        elif cur.opcode == "tuple" and indices and indices[-1] < len(cur.operands):
            cur = module.instruction(cur.operands[indices.pop()], cur.computation)
        else:
            return False
    return False


def argmax_reads(ctx: HasModules) -> tuple[str, ...]:
    """``module: dtype[dims]`` of the large tensor each argmax/argmin in ``ctx``'s modules reads.

    The bytes an argmax reads are those of its entry-level op's operands (on XLA:CPU a bf16 argmax
    fusion reads bf16 and widens in registers), so the dtype is read there, not from the reducer.
    Later stages of a multi-stage argmax read the first stage's partials and are left out.
    """
    out: list[str] = []
    for module in ctx.modules:
        for op, inner, kind in selection_reduces(module):
            if kind not in ("argmax", "argmin") or reads_partials(module, inner):
                continue
            data = module.instruction(reduce_inputs(inner)[0], inner.computation)
            elements = data.shape.num_elements if data is not None else 0
            operands = module.operands_of(op) if op is not inner else ([data] if data is not None else [])
            big = [o for o in operands if o.shape.num_elements == elements and not o.shape.is_tuple]
            for o in big or operands[:1]:
                dims = ",".join(str(d) for d in o.shape.dims)
                entry = f"{module.name}: {o.shape.dtype}[{dims}]"
                if entry not in out:
                    out.append(entry)
    return tuple(out)


def argmax_times(ctx: TimedModules) -> tuple[tuple[str, float], ...]:
    """(module, time per step in us) of the entry op that runs each argmax/argmin, where timed."""
    out: dict[str, float] = {}
    for module in ctx.modules:
        for op, _, kind in selection_reduces(module):
            if kind in ("argmax", "argmin") and module.name not in out:
                timing = ctx.op_timing(module, op.name)
                if timing is not None:
                    out[module.name] = timing.time_per_step_us
    return tuple(out.items())


__all__ = [
    "PASS_THROUGH_OPCODES", "ConvertProgram", "HasModules", "TimedModules", "ValueUse", "argmax_reads",
    "argmax_times", "callers", "convert_programs", "dtype_shape", "entry_op", "entry_parameter_of", "fusion_read_of",
    "is_argmax_program", "is_exact_widening", "key_instruction", "reads_partials", "only_reaches_selection", "reduce_inputs",
    "selection_reduce_kind", "selection_reduces", "value_uses", "widening_convert_of",
]
