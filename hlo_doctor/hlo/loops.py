"""Loop-carried buffers of ``while`` loops: what each element a body returns is built from.

A ``while`` body takes its state as one tuple and returns a tuple of the same shape. For element k,
:func:`carried_flow` follows the value the body returns back to the incoming element k through what
only moves data (:mod:`~hlo_doctor.hlo.views`: which box of the element each value holds, at which
positions, and how many of its values may differ from it: the updates written into it).

From that: whether the returned element is the incoming one at the same positions except for
``bytes_differ`` bytes, which body-level ops carry it (the chain) and how many bytes they write per
iteration (``bytes_written``: an in-place dynamic-update-slice writes its update, any other op its
whole result), and whether the element was cut into pieces and put back together on the way (``cut``).
:func:`loop_rebuilds` keeps the elements written whole while only a small part of them changes: a
decode loop that slices each layer's cache out of a stacked cache and re-stacks all of them every token.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from hlo_doctor.hlo import HloComputation, HloInstruction, HloModule, HloShape
from hlo_doctor.hlo.navigation import entry_op
from hlo_doctor.hlo.views import View, is_whole, walk_element

__all__ = ["CarriedFlow", "carried_flow", "carried_flows", "loop_rebuilds", "while_body", "written_bytes"]

# Below this an element is a counter or a scalar, not a buffer worth a finding.
MIN_BYTES = 4096
# An element counts as "changed only in a small part" when at most this share of its bytes differ.
MAX_DIFFER_SHARE = 0.25
# What a chain op may do for its time to count as the rebuild's: move data (small work aside, see
# _moves_only). A fusion doing real work on the way is work that keeping the buffer in place keeps.
_MOVEMENT = frozenset({
    "bitcast", "reshape", "copy", "transpose", "slice", "dynamic-slice", "dynamic-update-slice",
    "concatenate", "convert", "broadcast", "tuple", "get-tuple-element", "parameter", "constant",
})
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")
_FREE = frozenset({"bitcast", "get-tuple-element", "tuple", "parameter"})


@dataclass(frozen=True, slots=True)
class CarriedFlow:
    """How a ``while`` body builds the element it returns at ``index`` from the incoming one."""

    module: HloModule
    loop: HloInstruction
    body: HloComputation
    index: int
    element: HloShape
    bytes_differ: int
    """Bytes of the returned element that may differ from the incoming one (the updates)."""
    bytes_written: int
    """Bytes the chain's ops write per iteration."""
    cut: bool
    """The element was sliced into pieces and put back together."""
    chain: tuple[HloInstruction, ...]
    """Body-level ops the element goes through on its way to the output that write memory (body order)."""
    movement: tuple[HloInstruction, ...] = field(default=())
    """What keeping the element in place removes: the chain ops that only move data, and the copies
    and updates of its pieces on the way to the ops that read them (the reads themselves stay)."""
    joins: tuple[HloInstruction, ...] = field(default=())
    """The concatenations (bare or fused) that put pieces of the element back together, largest first."""

    @property
    def assembler(self) -> HloInstruction | None:
        """The chain op that puts the whole element back together (holds the largest join)."""
        if not self.joins:
            return None
        return entry_op(self.module, self.joins[0])

    @property
    def widened_updates(self) -> bool:
        """The chain updates the element in a wider type and converts the result back (XLA:CPU's bf16
        normalisation): an update of it is not done in place by this compiler, whatever the program."""
        for op in self.chain:
            body = self.module.fusion_body(op)
            for inst in body.instructions if body is not None else ():
                if inst.opcode != "dynamic-update-slice" or inst.dtype == self.element.dtype:
                    continue
                if any(u.opcode == "convert" and u.dtype == self.element.dtype
                       for u in self.module.users_of(inst)):
                    return True
        return False

    @property
    def writer(self) -> HloInstruction | None:
        """The op that writes the element whole: the last chain op writing at least its size."""
        whole = [op for op in self.chain if written_bytes(self.module, op) >= self.element.nbytes]
        return whole[-1] if whole else (self.chain[-1] if self.chain else None)

    @property
    def rebuilt(self) -> bool:
        """Written whole every iteration (cut and put back together) while only a small part changes."""
        size = self.element.nbytes
        return (self.cut and size >= MIN_BYTES and self.bytes_written >= size
                and self.bytes_differ <= MAX_DIFFER_SHARE * size)


def while_body(module: HloModule, loop: HloInstruction) -> HloComputation | None:
    """The body computation of a ``while`` instruction."""
    match = _BODY.search(loop.raw)
    if match:
        return module.computation(match.group(1))
    for name in loop.called_computations:  # without the raw text: the one whose root is not a predicate
        comp = module.computation(name)
        if comp is not None and comp.root.dtype != "pred":
            return comp
    return None


def carried_flow(module: HloModule, loop: HloInstruction, index: int) -> CarriedFlow | None:
    """How ``loop``'s body builds element ``index`` of its state from the incoming element, or None
    when the returned value is not the incoming element at the same positions (any bytes changed)."""
    body = while_body(module, loop)
    if body is None or not body.parameters or body.root.opcode != "tuple":
        return None
    state = body.parameters[0]
    if not state.shape.is_tuple or index >= len(state.shape.elements) or index >= len(body.root.operands):
        return None
    element = state.shape.elements[index]
    if element.is_tuple or not element.dims or element.is_dynamic:
        return None
    out_name = body.root.operands[index]
    walk = walk_element(module, body, index, element)
    out = walk.values.get(out_name)
    out_inst = module.instruction(out_name, body.name)
    if not isinstance(out, View) or out_inst is None or not is_whole(out, out_inst.shape, element):
        return None
    ops = [i for i in body.instructions if i.name in out.ops and i.opcode not in _FREE]
    # Off the way to the output: copies and updates of pieces made for the ops that read them. Keeping
    # the element in place, a read takes its slice of the updated element instead.
    side = [i for i in body.instructions if i.name not in out.ops and i.opcode not in _FREE
            and isinstance(walk.values.get(i.name), View) and _copies_or_updates(module, i)]
    joins = sorted((j for top, j in walk.joins if top in out.ops), key=lambda j: -j.shape.nbytes)
    return CarriedFlow(
        module=module, loop=loop, body=body, index=index, element=element,
        bytes_differ=min(out.differ * element.element_bits // 8, element.nbytes),
        bytes_written=sum(written_bytes(module, op) for op in ops), cut=out.cut, chain=tuple(ops),
        movement=tuple(op for op in body.instructions
                       if (op in ops or op in side) and _moves_only(module, op)),
        joins=tuple(joins),
    )


def carried_flows(module: HloModule, loop: HloInstruction) -> Iterator[CarriedFlow]:
    """:func:`carried_flow` of every array element of ``loop``'s state that the body changes."""
    body = while_body(module, loop)
    if body is None or not body.parameters or body.root.opcode != "tuple":
        return
    state = body.parameters[0]
    for k, element in enumerate(state.shape.elements):
        if element.is_tuple or element.nbytes < MIN_BYTES or k >= len(body.root.operands):
            continue
        out = module.instruction(body.root.operands[k], body.name)
        if out is None or out.opcode == "get-tuple-element":
            continue  # passed through unchanged
        flow = carried_flow(module, loop, k)
        if flow is not None:
            yield flow


def loop_rebuilds(module: HloModule) -> list[CarriedFlow]:
    """Loop-carried elements written whole every iteration while only a small part of them changes.

    An op that carries two such elements is counted in the first one's ``movement`` only.
    """
    out: list[CarriedFlow] = []
    for loop in module.instructions():
        if loop.opcode != "while":
            continue
        taken: set[str] = set()
        for flow in carried_flows(module, loop):
            if not flow.rebuilt:
                continue
            movement = tuple(op for op in flow.movement if op.name not in taken)
            taken |= {op.name for op in flow.movement}
            out.append(replace(flow, movement=movement))
    return out


def written_bytes(module: HloModule, op: HloInstruction) -> int:
    """Bytes ``op`` writes when it runs: its update when it is a dynamic-update-slice done in place
    (bare, or a fusion rooted at one into a parameter of the fusion's own shape), else its result."""
    if op.opcode in _FREE:
        return 0
    dus = _in_place_update(module, op)
    return dus.nbytes if dus is not None else op.shape.nbytes


def _in_place_update(module: HloModule, op: HloInstruction) -> HloShape | None:
    """The update's shape when ``op`` updates its operand's buffer in place, else None.

    XLA shares the buffer of a dynamic-update-slice (bare, or the root of a fusion, operand 0 a
    parameter of the fusion) with its operand only when both have the same shape and layout.
    """
    if op.opcode == "dynamic-update-slice":
        ops = module.operands_of(op)
        return ops[1].shape if len(ops) > 1 and ops[0].shape == op.shape else None
    body = module.fusion_body(op)
    if body is None or body.root.opcode != "dynamic-update-slice":
        return None
    inner = module.operands_of(body.root)
    if len(inner) < 2 or inner[0].opcode != "parameter" or inner[0].parameter_number is None:
        return None
    outer = module.operands_of(op)
    number = inner[0].parameter_number
    if number >= len(outer) or outer[number].shape != op.shape:
        return None
    return inner[1].shape


def _copies_or_updates(module: HloModule, op: HloInstruction) -> bool:
    """A bare copy, or an op that updates (a dynamic-update-slice, bare or fused)."""
    if op.opcode in ("copy", "dynamic-update-slice"):
        return True
    body = module.fusion_body(op)
    return body is not None and any(i.opcode == "dynamic-update-slice" for i in body.instructions)


def _moves_only(module: HloModule, op: HloInstruction, size: int = 0) -> bool:
    """True when ``op`` only moves data: every instruction in it is data movement, or small next to
    the op's result (a quarter of its elements or less: computing a position or the update written
    into the buffer, work that the update in place keeps and whose time the buffer's bytes dwarf)."""
    size = size or max((s.num_elements for s in (op.shape.elements or (op.shape,))), default=0)
    body = module.fusion_body(op)
    if body is None:
        return op.opcode in _MOVEMENT
    for inst in body.instructions:
        if module.fusion_body(inst) is not None:
            if not _moves_only(module, inst, size):
                return False
        elif inst.opcode not in _MOVEMENT and 4 * inst.shape.num_elements > size:
            return False
    return True


