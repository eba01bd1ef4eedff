"""Order-invariant (selection) reductions: max, min, argmax, argmin, top-k, and what an argmax reads.

A selection's result does not depend on the precision of an exact widening of its input, which is
what the widening rules and ``verify``'s check of a treatment ask.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from hlo_doctor.hlo import HloInstruction, HloModule
from hlo_doctor.hlo.navigation import callers, entry_op

__all__ = [
    "HasModules", "TimedModules", "argmax_reads", "argmax_times", "is_argmax_program", "reads_partials",
    "reduce_inputs", "selection_reduce_kind", "selection_reduces",
]

# A reducer made only of these selects one of its inputs: max, min, argmax, argmin. Its result does
# not depend on the precision of an exact widening. ``convert`` is allowed because XLA:CPU widens
# bf16 inside reducers itself.
_SELECTION_OPCODES = frozenset({
    "maximum", "minimum", "compare", "select", "and", "or", "not", "convert", "parameter", "tuple",
    "constant",
})


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
