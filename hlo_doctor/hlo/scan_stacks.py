"""Per-layer state that a scan over stacked layers takes as its input stack and writes into a new one.

``jax.lax.scan`` (and flax's ``nn.scan``) over stacked layers with a KV cache as the scanned input
(``xs``) and output (``ys``) compiles to a ``while`` whose state holds both stacks: the input stack,
passed through unchanged, and the output stack, which XLA fills before the loop (a ``broadcast``).
Each iteration dynamic-slices its layer out of the input stack, copies it, writes the new position
into it, and dynamic-update-slices the whole layer into the output stack. :func:`restacked_states`
finds that chain in an optimized module: per loop and output stack, the ops that read the layer out,
copy it and write it whole (what carrying the stack in the loop's state and updating one position
in place removes), the write of the position itself (what stays), the fill of the output stack
before the loop and a copy of it after the loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hlo_doctor.hlo import HloComputation, HloInstruction, HloModule, HloShape
from hlo_doctor.hlo.loops import while_body
from hlo_doctor.hlo.navigation import callers

__all__ = ["RestackedState", "restacked_states", "update_bytes"]

# Below this a stacked element is a counter or a small carry, not state worth a finding.
MIN_BYTES = 4096
_MOVE = frozenset({"bitcast", "reshape", "copy"})
_FILL = frozenset({"broadcast", "constant", "bitcast", "reshape"})


@dataclass(frozen=True, slots=True)
class RestackedState:
    """One per-layer state read from a loop's input stack and written whole into its output stack."""

    module: HloModule
    loop: HloInstruction
    body: HloComputation
    input_index: int
    """The loop state's element holding the input stack (passed through unchanged)."""
    output_index: int
    """The element holding the output stack (each layer written into it whole)."""
    stack: HloShape
    read: HloInstruction
    """The body-level op that dynamic-slices a layer out of the input stack."""
    writer: HloInstruction
    """The body-level op that writes the whole layer into the output stack."""
    chain: tuple[HloInstruction, ...]
    """Body-level ops from the read to the writer (body order)."""
    updates: tuple[HloInstruction, ...]
    """Chain ops that write a part of the layer (the new position): what an in-place update keeps."""
    fill: HloInstruction | None
    """The op outside the loop that fills the output stack before it (a broadcast), if any."""
    copy_out: HloInstruction | None
    """A copy of the loop's output stack after the loop, if any."""

    @property
    def layer_bytes(self) -> int:
        return self.stack.nbytes // max(1, self.stack.dims[0])

    @property
    def removed(self) -> tuple[HloInstruction, ...]:
        """What carrying the stack and updating it in place removes: the chain but its updates, the
        fill and the copy after the loop."""
        kept = {u.name for u in self.updates}
        ops = [op for op in self.chain if op.name not in kept]
        return tuple(ops) + tuple(op for op in (self.fill, self.copy_out) if op is not None)


def restacked_states(module: HloModule) -> list[RestackedState]:
    """Every (loop, output stack) whose layers are read from an input stack and written whole."""
    out: list[RestackedState] = []
    for loop in module.instructions():
        if loop.opcode != "while":
            continue
        body = while_body(module, loop)
        if body is None or not body.parameters or body.root.opcode != "tuple":
            continue
        state = body.parameters[0]
        elements = state.shape.elements
        for k, element in enumerate(elements):
            if (element.is_tuple or len(element.dims) < 2 or element.dims[0] < 2
                    or element.nbytes < MIN_BYTES or k >= len(body.root.operands)):
                continue
            found = _restacked(module, loop, body, state, k, element)
            if found is not None:
                out.append(found)
    return out


def _restacked(module: HloModule, loop: HloInstruction, body: HloComputation, state: HloInstruction,
               k: int, element: HloShape) -> RestackedState | None:
    writer = module.instruction(body.root.operands[k], body.name)
    if writer is None:
        return None
    dus = _root_update(module, writer)
    if dus is None or _element_of(module, body, state, module.operands_of(dus)[0]) != k:
        return None
    update = module.operands_of(dus)[1]
    if update.shape.num_elements * element.dims[0] != element.num_elements:
        return None  # not one whole layer
    visited: list[HloInstruction] = [writer]
    read = _read_from(module, body, state, update, visited)
    if read is None:
        return None
    read_op, j, sliced = read
    read_at = _index_key(module, body, module.operands_of(sliced)[1])
    written_at = _index_key(module, body, module.operands_of(dus)[2])
    if read_at is not None and written_at is not None and read_at != written_at:
        return None  # the layer written is not the layer read (a roll, a shift): no in-place update does that
    if j == k or state.shape.elements[j] != element or body.root.operands[j] != _gte_name(body, state, j):
        return None  # the input stack must be another element of the same shape, passed through
    names = {op.name for op in visited}
    chain = tuple(i for i in body.instructions if i.name in names)
    layer = element.nbytes // element.dims[0]
    updates = tuple(op for op in chain if op is not writer and op is not read_op
                    and update_bytes(module, op) < layer)
    fill, copy_out = _around(module, loop, k)
    return RestackedState(module=module, loop=loop, body=body, input_index=j, output_index=k,
                          stack=element, read=read_op, writer=writer, chain=chain, updates=updates,
                          fill=fill, copy_out=copy_out)


def _root_update(module: HloModule, op: HloInstruction) -> HloInstruction | None:
    """The dynamic-update-slice ``op`` is, or its fusion's root is."""
    if op.opcode == "dynamic-update-slice":
        return op
    body = module.fusion_body(op)
    if body is not None and body.root.opcode == "dynamic-update-slice":
        return body.root
    return None


def update_bytes(module: HloModule, op: HloInstruction) -> int:
    """Bytes of the update ``op`` writes when it is a dynamic-update-slice (bare or fused), else its
    whole result's."""
    dus = _root_update(module, op)
    ops = module.operands_of(dus) if dus is not None else []
    return ops[1].shape.nbytes if len(ops) > 1 else op.shape.nbytes


def _gte_name(body: HloComputation, state: HloInstruction, index: int) -> str:
    for inst in body.instructions:
        if (inst.opcode == "get-tuple-element" and inst.operands[:1] == (state.name,)
                and inst.attribute("index") == str(index)):
            return inst.name
    return ""


def _outer(module: HloModule, inst: HloInstruction) -> HloInstruction | None:
    """The value a fusion parameter stands for (the calling fusion's operand), else None."""
    caller = callers(module).get(inst.computation)
    if caller is None or caller.opcode != "fusion" or inst.parameter_number is None:
        return None
    ops = module.operands_of(caller)
    return ops[inst.parameter_number] if inst.parameter_number < len(ops) else None


def _element_of(module: HloModule, body: HloComputation, state: HloInstruction,
                inst: HloInstruction) -> int | None:
    """The state element ``inst`` is, through bitcasts and fusion parameters, else None."""
    for _ in range(32):
        if inst.opcode == "parameter" and inst.computation != body.name:
            nxt = _outer(module, inst)
        elif inst.opcode == "bitcast":
            nxt = _first(module, inst)
        elif inst.opcode == "get-tuple-element" and inst.operands[:1] == (state.name,):
            return int(inst.attribute("index", "-1") or -1)
        else:
            return None
        if nxt is None:
            return None
        inst = nxt
    return None


def _read_from(module: HloModule, body: HloComputation, state: HloInstruction, value: HloInstruction,
               visited: list[HloInstruction]) -> tuple[HloInstruction, int, HloInstruction] | None:
    """(the body-level op slicing a layer out of a state element, that element, the dynamic-slice) that
    ``value`` is,
    with its positions updated and copies on the way; the body-level ops passed are added to
    ``visited``. None when anything but data movement and updates lies between them."""
    cur = value
    for _ in range(64):
        if cur.computation == body.name and cur.opcode not in ("get-tuple-element", "parameter"):
            visited.append(cur)
        if cur.opcode == "fusion":
            fused = module.fusion_body(cur)
            if fused is None:
                return None
            nxt: HloInstruction | None = fused.root
        elif cur.opcode == "parameter":
            nxt = _outer(module, cur)
        elif cur.opcode in _MOVE or cur.opcode == "dynamic-update-slice":
            nxt = _first(module, cur)
        elif cur.opcode == "dynamic-slice":
            source = module.operands_of(cur)
            sizes = cur.attribute("dynamic_slice_sizes")
            j = _element_of(module, body, state, source[0]) if source else None
            if j is None or sizes.split(",")[0].strip("{ ") != "1":
                return None
            return _body_op(module, body, cur), j, cur
        else:
            return None
        if nxt is None:
            return None
        cur = nxt
    return None


_CONSTANT = re.compile(r"constant\(([^)]*)\)")


def _index_key(module: HloModule, body: HloComputation, inst: HloInstruction, depth: int = 0) -> object:
    """What an index computes, comparable across fusions: body-level values by name, constants by
    value, other ops by opcode (and comparison direction) over their operands' keys; copies, bitcasts
    and fusion parameters are seen through. None when too deep to tell."""
    if depth > 24:
        return None
    nxt: HloInstruction | None = None
    if inst.opcode == "parameter" and inst.computation != body.name:
        nxt = _outer(module, inst)
        if nxt is None:
            return ("parameter", inst.computation, inst.name)
    elif inst.opcode in ("copy", "bitcast"):
        nxt = _first(module, inst)
    elif inst.opcode == "fusion":
        fused = module.fusion_body(inst)
        nxt = fused.root if fused is not None else None
    if nxt is not None:
        return _index_key(module, body, nxt, depth + 1)
    if inst.opcode == "constant":
        found = _CONSTANT.search(inst.raw)
        return ("constant", inst.dtype, found.group(1) if found else inst.name)
    if inst.computation == body.name and inst.opcode in ("get-tuple-element", "parameter"):
        return ("value", inst.name)
    keys = tuple(_index_key(module, body, op, depth + 1) for op in module.operands_of(inst))
    if any(key is None for key in keys):
        return None
    return (inst.opcode, inst.attribute("direction"), keys)


def _body_op(module: HloModule, body: HloComputation, inst: HloInstruction) -> HloInstruction:
    """The body-level op that runs ``inst`` (itself, or the fusion holding it)."""
    by_comp = callers(module)
    cur = inst
    while cur.computation != body.name:
        caller = by_comp.get(cur.computation)
        if caller is None:
            return inst
        cur = caller
    return cur


def _around(module: HloModule, loop: HloInstruction, k: int) -> tuple[HloInstruction | None,
                                                                       HloInstruction | None]:
    """(the op filling element ``k`` of ``loop``'s state before it, a copy of it after the loop)."""
    fill = None
    init = _first(module, loop)
    if init is not None and init.opcode == "tuple" and k < len(init.operands):
        op = module.instruction(init.operands[k], init.computation)
        while op is not None and op.opcode == "copy":
            op = _first(module, op)
        if op is not None and _fills(module, op):
            fill = op
    copy_out = None
    for user in module.users_of(loop):
        if user.opcode == "get-tuple-element" and user.attribute("index") == str(k):
            copy_out = next((u for u in module.users_of(user) if u.opcode == "copy"), None)
    return fill, copy_out


def _fills(module: HloModule, op: HloInstruction) -> bool:
    """A broadcast of a scalar (bare or a fusion of nothing else): a buffer filled with one value."""
    body = module.fusion_body(op)
    insts = body.instructions if body is not None else (op,)
    return (any(i.opcode == "broadcast" for i in insts)
            and all(i.opcode in _FILL or i.opcode == "parameter" for i in insts))


def _first(module: HloModule, inst: HloInstruction) -> HloInstruction | None:
    """``inst``'s first operand, or None."""
    ops = module.operands_of(inst)
    return ops[0] if ops else None
