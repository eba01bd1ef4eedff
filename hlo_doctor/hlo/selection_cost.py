"""What a monotone map before a selection costs, and how a finding shows it.

:mod:`~hlo_doctor.hlo.selection_flow` finds the map (:class:`MonotoneMap`) and the level ops that
exist only for it; this module estimates the map's work that XLA fused into the selection's own op,
picks the instruction whose line a finding shows, and names the map in words.
"""

from __future__ import annotations

from hlo_doctor.hlo import HloInstruction, HloModule, real_work
from hlo_doctor.hlo.selection_flow import TRANSCENDENTAL, MonotoneMap

__all__ = ["describe", "fused_share", "is_map_work", "line_instruction"]


def is_map_work(inst: HloInstruction) -> bool:
    """Map work a fix removes: not a convert or keras' -0.0 tie break, which stay."""
    return real_work(inst) and inst.opcode not in ("convert", "select", "broadcast", "bitcast", "reshape", "copy")


def fused_share(m: HloModule, mm: MonotoneMap) -> float:
    """An estimate of the share of the selection op's time that the map fused into it costs.

    Counted per element: each transcendental map instruction (``exp``, ``log``...) as two, against
    one for each other instruction of the op and of its reducer; row-constant arithmetic (the
    multiply by 1/sum) as nothing. Measured on XLA:CPU's argmax over f32[8,256000] (one trace,
    20 steps): an ``exp`` fused into it cost 12% of the op (this gives 15%), a ``log`` 16% (13%),
    the multiply by 1/sum nothing measurable.
    """
    heavy = [s for s in mm.fused if s.opcode in TRANSCENDENTAL]
    body = m.fusion_body(mm.selection_op)
    if not heavy or body is None:
        return 0.0
    names = {(s.computation, s.name) for s in heavy}
    rest = [i for i in body.instructions if real_work(i) and i.opcode not in ("broadcast", "bitcast", "constant")
            and (i.computation, i.name) not in names]
    reducer = m.computation(mm.selection.called_computations[0]) if mm.selection.called_computations else None
    rest += [i for i in reducer.instructions if real_work(i) and i.opcode != "constant"] if reducer else []
    weight = 2 * len(heavy)
    return weight / (weight + max(1, len(rest)))


def line_instruction(m: HloModule, mm: MonotoneMap) -> HloInstruction:
    """The instruction whose line the finding shows: the map's exp, else its log, divide, multiply."""
    pool = [*mm.steps, *mm.in_source, *mm.fused]
    for op in mm.ops:
        body = m.fusion_body(op)
        pool += list(body.instructions) if body is not None else [op]
    for kinds in (("exponential",), ("log",), ("divide", "multiply", "subtract")):
        hit = next((i for i in pool if i.opcode in kinds and i.source), None)
        if hit is not None:
            return hit
    return mm.steps[0]


def describe(mm: MonotoneMap) -> str:
    """``softmax``-like words for the map, from what it computes."""
    ops = {s.opcode for s in (*mm.steps, *mm.fused, *mm.in_source)}
    if "exponential" in ops and "multiply" in ops or "divide" in ops and "exponential" in ops:
        return "a softmax"
    if "subtract" in ops and "exponential" not in ops:
        return "a log-softmax" if len([s for s in mm.steps if s.opcode == "subtract"]) > 1 else "a shifted value"
    return "a monotone map (" + ", ".join(sorted(o for o in ops if o not in ("bitcast", "reshape"))) + ")"
