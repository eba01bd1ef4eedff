"""What a monotone map before a selection costs, and how a finding shows it.

:mod:`~hlo_doctor.hlo.selection_flow` finds the map (:class:`MonotoneMap`) and the level ops that
exist only for it; this module estimates the map's work that XLA fused into the selection's own op,
picks the instruction whose line a finding shows, and names the map in words.
"""

from __future__ import annotations

from hlo_doctor.hlo import HloInstruction, HloModule, real_work
from hlo_doctor.hlo.selection_flow import TRANSCENDENTAL, MonotoneMap

__all__ = ["describe", "fix_text", "fused_share", "is_map_work", "line_instruction", "source_share"]


def is_map_work(inst: HloInstruction) -> bool:
    """Map work a fix removes: not a convert or keras' -0.0 tie break, which stay."""
    return real_work(inst) and inst.opcode not in ("convert", "select", "broadcast", "bitcast", "reshape", "copy")


def _removed_with_map(mm: MonotoneMap) -> list[HloInstruction]:
    """The map's instructions inside the selection's op that go away with it: its steps and row
    constants there, less the converts next to the source (the input's own rounding, which stays)."""
    steps = list(mm.steps)
    while steps and steps[-1].opcode == "convert":
        steps.pop()
    kept = {(s.computation, s.name) for s in mm.steps} - {(s.computation, s.name) for s in steps}
    return [f for f in mm.fused if (f.computation, f.name) not in kept and f.opcode != "select"]


def _weight(inst: HloInstruction) -> int:
    """Per-element cost of one removed instruction, in instructions of the selection's loop."""
    if inst.opcode in TRANSCENDENTAL:
        return 2
    return 1 if inst.opcode in ("convert", "reduce") else 0


def _loop_instructions(m: HloModule, mm: MonotoneMap, removed: list[HloInstruction]) -> int:
    """Instructions the selection's op runs per element, its reducer's included, less ``removed``."""
    body = m.fusion_body(mm.selection_op)
    names = {(s.computation, s.name) for s in removed}
    rest = [i for i in body.instructions if real_work(i) and i.opcode not in ("broadcast", "bitcast", "constant")
            and (i.computation, i.name) not in names] if body is not None else [mm.selection]
    reducer = m.computation(mm.selection.called_computations[0]) if mm.selection.called_computations else None
    rest += [i for i in reducer.instructions if real_work(i) and i.opcode != "constant"] if reducer else []
    return max(1, len(rest))


def fused_share(m: HloModule, mm: MonotoneMap) -> float:
    """An estimate of the share of the selection op's time that the map fused into it costs.

    Counted per element against one for each other instruction of the op and of its reducer:
    a transcendental map instruction (``exp``, ``log``, ``tanh``) as two, a rounding convert of
    the map's intermediates (XLA:CPU's bf16 normalisation) or a fused reduce as one, row-constant
    arithmetic (a multiply by 1/sum or by a cap) as nothing. Measured on XLA:CPU's argmax over
    f32[8,256000] (one trace, 20 steps): an ``exp`` fused into it cost 12% of the op (this gives
    15%), a ``log`` 16% (13%), the multiply by 1/sum nothing measurable; recurrentgemma's bf16
    soft cap (``30 * tanh(x / 30)``, six rounding converts) 39% by process CPU time, 58% by wall
    time (the field what-if, wide intervals; this gives 35%).
    """
    removed = _removed_with_map(mm)
    weight = sum(_weight(i) for i in removed)
    if not weight or m.fusion_body(mm.selection_op) is None:
        return 0.0
    return weight / (weight + _loop_instructions(m, mm, removed))


def source_share(m: HloModule, mm: MonotoneMap) -> float:
    """The map XLA fused into the op computing the logits, as a fraction of the selection op's time:
    the map's weighted instructions per element (as in :func:`fused_share`) over the selection's.
    Both read every element of the logits once; the selection's time is the measured unit. On
    XLA:CPU (a matmul fused with the softmax's max and exp, against the matmul alone, one trace)
    this was 1.0x the saving at 8x256000 and 1.7x at 8x32000, where the trace was noisiest.
    """
    weight = sum(_weight(i) for i in mm.in_source)
    return weight / _loop_instructions(m, mm, []) if weight else 0.0


def line_instruction(m: HloModule, mm: MonotoneMap) -> HloInstruction:
    """The instruction whose line the finding shows: the map's exp, else its log, tanh, divide..."""
    pool = [*mm.steps, *mm.in_source, *mm.fused]
    for op in mm.ops:
        body = m.fusion_body(op)
        pool += list(body.instructions) if body is not None else [op]
    for kinds in (("exponential",), ("log",), ("tanh", "logistic"), ("divide", "multiply", "subtract")):
        hit = next((i for i in pool if i.opcode in kinds and i.source), None)
        if hit is not None:
            return hit
    return mm.steps[0]


def describe(mm: MonotoneMap) -> str:
    """``softmax``-like words for the map, from what it computes."""
    ops = {s.opcode for s in (*mm.steps, *mm.fused, *mm.in_source)}
    if "exponential" in ops and "multiply" in ops or "divide" in ops and "exponential" in ops:
        return "a softmax"
    if "tanh" in ops and "exponential" not in ops:
        return "a soft cap (c * tanh(x / c))" if "multiply" in ops else "a tanh"
    if "subtract" in ops and "exponential" not in ops:
        return "a log-softmax" if len([s for s in mm.steps if s.opcode == "subtract"]) > 1 else "a shifted value"
    return "a monotone map (" + ", ".join(sorted(o for o in ops if o not in ("bitcast", "reshape"))) + ")"


_FORMULA = {"a softmax": "softmax(x/T)", "a log-softmax": "log_softmax(x)", "a soft cap (c * tanh(x / c))": "c*tanh(x/c)"}
_CALL = {"argmax": "argmax", "argmin": "argmin", "top-k": "top_k", "sort": "argsort"}


def fix_text(mm: MonotoneMap) -> str:
    """What to change, in the words of the map found."""
    what = describe(mm)
    if what == "a softmax" and mm.kind == "argmax":
        return ("take argmax of the logits directly (argmax(softmax(x/T)) == argmax(x)); keep softmax only "
                "where probabilities are returned")
    call = _CALL.get(mm.kind, mm.kind)
    inner = _FORMULA.get(what, "f(x)")
    why = f"{call}({inner}) == {call}(x)" + ("" if what in _FORMULA else " for an increasing f")
    name = what.split(" (")[0].removeprefix("a ")
    return f"take {call} of the logits directly ({why}); keep the {name} only where its values are returned"
