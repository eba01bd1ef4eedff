"""Repairs to a captured ``HloModuleProto`` that jaxlib's importer needs before it reads the module.

XLA:TPU narrows a reduction's result in place: an argmax whose value output nobody reads is left
with f32 reducers (its ``to_apply`` computes in f32) and a bf16 result. XLA's own verifier accepts
that; StableHLO's does not (a reduce's result types are those its body returns), so
``hlo_to_stablehlo`` refuses the whole module. :func:`widen_narrowed_reductions` gives each such
reduce the types its body returns and converts them back to the captured types right after it:
the module computes what it computed, and XLA, compiling it again, narrows it again.

XLA:TPU also constrains some custom calls' operand layouts to its tiled layouts (the
``AssumeGatherIndicesInBound`` call it puts before a gather's indices: ``s32[1024]{0:T(1024)}``). The
importer can express a custom call's layouts only as dimension orders and refuses the module ("Tiled
layout is not supported yet"). :func:`drop_tiled_layout_constraints` takes those constraints off:
XLA, compiling the module again, lays the operands out itself.

Field numbers are XLA's ``hlo.proto`` and ``xla_data.proto``; every other field is kept as it was
(an unknown field to this reduced schema is carried through unchanged).
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _messages() -> Any:
    from hlo_doctor.memory.proto import message_classes

    (module,) = message_classes("hlo_doctor/replay/hlo_repair.proto", "hlo_doctor.repair", [
        ("Shape", [("element_type", 2, "e", False), ("dimensions", 3, "i", True), ("tuple_shapes", 4, "Shape", True),
                   ("layout", 5, "Layout", False)]),
        ("Layout", [("minor_to_major", 1, "i", True), ("tiles", 6, "Tile", True)]),
        ("Tile", [("dimensions", 1, "i", True)]),
        ("Instruction", [("name", 1, "s", False), ("opcode", 2, "s", False), ("shape", 3, "Shape", False),
                         ("tuple_index", 13, "i", False), ("id", 35, "i", False), ("operand_ids", 36, "i", True),
                         ("called_computation_ids", 38, "i", True), ("constrain_layout", 56, "b", False),
                         ("operand_shapes_with_layout", 57, "Shape", True)]),
        ("Computation", [("instructions", 2, "Instruction", True), ("id", 5, "i", False), ("root_id", 6, "i", False)]),
        ("Module", [("computations", 3, "Computation", True)])], ("Module",))
    return module


def _leaf_types(shape: Any) -> list[int]:
    """The element types of ``shape``'s leaves, in order (one for an array)."""
    return [t.element_type for t in shape.tuple_shapes] if shape.tuple_shapes else [shape.element_type]


def widen_narrowed_reductions(data: bytes) -> tuple[bytes, int]:
    """``data`` (a serialized ``HloModuleProto``) with every reduce whose result types are not those
    its ``to_apply`` returns given its body's types and converted back after it; how many were.
    ``data`` itself where none is (or where it is no module this schema reads)."""
    from google.protobuf.message import DecodeError

    try:
        module = _messages().FromString(data)
    except DecodeError:
        return data, 0
    roots: dict[int, Any] = {}
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.id == comp.root_id:
                roots[comp.id] = ins
    next_id = 1 + max((ins.id for comp in module.computations for ins in comp.instructions), default=0)
    repaired = 0
    for comp in module.computations:
        for index in range(len(comp.instructions) - 1, -1, -1):
            reduce = comp.instructions[index]
            if reduce.opcode != "reduce" or len(reduce.called_computation_ids) != 1:
                continue
            body = roots.get(reduce.called_computation_ids[0])
            if body is None:
                continue
            captured, wide = _leaf_types(reduce.shape), _leaf_types(body.shape)
            if len(captured) != len(wide) or captured == wide:
                continue
            old_shape = type(reduce.shape)()
            old_shape.CopyFrom(reduce.shape)
            made = _widen(comp, index, reduce, old_shape, wide, next_id)
            next_id += len(made)
            repaired += 1
    return (module.SerializeToString(), repaired) if repaired else (data, 0)


def _tiled(shape: Any) -> bool:
    """Whether ``shape`` or one of its leaves names a tiled layout."""
    return bool(shape.layout.tiles) or any(_tiled(leaf) for leaf in shape.tuple_shapes)


def drop_tiled_layout_constraints(data: bytes) -> tuple[bytes, int]:
    """``data`` (a serialized ``HloModuleProto``) with the operand layout constraints taken off every
    instruction that constrains an operand to a tiled layout; how many were. ``data`` itself where
    none does (or where it is no module this schema reads)."""
    from google.protobuf.message import DecodeError

    try:
        module = _messages().FromString(data)
    except DecodeError:
        return data, 0
    dropped = 0
    for comp in module.computations:
        for ins in comp.instructions:
            if any(_tiled(shape) for shape in ins.operand_shapes_with_layout):
                del ins.operand_shapes_with_layout[:]
                ins.constrain_layout = False
                dropped += 1
    return (module.SerializeToString(), dropped) if dropped else (data, 0)


def _widen(comp: Any, index: int, reduce: Any, old_shape: Any, wide: list[int], next_id: int) -> list[Any]:
    """Retype ``reduce`` (instruction ``index`` of ``comp``) to ``wide``, insert the converts back to
    ``old_shape`` after it and point its users (and the root) at them; the new instructions."""
    Instruction = type(reduce)
    made: list[Any] = []

    def new(opcode: str, shape: Any, operands: list[int], suffix: str) -> Any:
        ins = Instruction(name=f"{reduce.name}.{suffix}", opcode=opcode, id=next_id + len(made),
                          operand_ids=operands)
        ins.shape.CopyFrom(shape)
        made.append(ins)
        return ins

    if old_shape.tuple_shapes:
        for leaf, element_type in zip(reduce.shape.tuple_shapes, wide, strict=True):
            leaf.element_type = element_type
        parts: list[int] = []
        for i, (leaf, narrow) in enumerate(zip(reduce.shape.tuple_shapes, old_shape.tuple_shapes, strict=True)):
            part = new("get-tuple-element", leaf, [reduce.id], f"part{i}")
            part.tuple_index = i
            if leaf.element_type != narrow.element_type:
                part = new("convert", narrow, [part.id], f"narrow{i}")
            parts.append(part.id)
        last = new("tuple", old_shape, parts, "narrowed")
    else:
        reduce.shape.element_type = wide[0]
        last = new("convert", old_shape, [reduce.id], "narrowed")
    mine = {ins.id for ins in made}
    for ins in comp.instructions:
        if ins.id not in mine and reduce.id in ins.operand_ids:
            ins.operand_ids[:] = [last.id if o == reduce.id else o for o in ins.operand_ids]
    if comp.root_id == reduce.id:
        comp.root_id = last.id
    for offset, ins in enumerate(made, start=1):
        comp.instructions.insert(index + offset, ins)
    return made
