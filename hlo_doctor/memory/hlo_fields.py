"""What the memory view reads of a program's HLO, straight from its ``HloModuleProto`` (field 1 of
the ``HloProto`` a trace's metadata plane stores): each instruction's name, opcode, shape, called
computations and Python stack (``metadata.stack_frame_id`` into the module's ``stack_frame_index``,
else ``source_file``/``source_line``), without printing the module as text and parsing it.

The fields are declared in a private descriptor pool (field numbers as ``xla/service/hlo.proto``
and ``xla/xla_data.proto`` give them), as :mod:`hlo_doctor.memory.proto` declares the assignment's.
What comes out is an :class:`~hlo_doctor.hlo.HloModule` holding only those fields (no operands or
attributes): enough for each buffer's op, shape and line (:mod:`hlo_doctor.memory.build`), and for
the op that matters inside a fusion (:func:`hlo_doctor.hlo.navigation.key_instruction`).

A shape is written as the text path writes it, or not at all: a shape whose proto holds anything
besides the element type, dimensions, dynamic dimensions, tuple elements and a layout's dimension
order (tiles, element sizes, memory spaces...), or an element type not known here, raises
:class:`UnwritableShape` where it is first needed, and the caller prints and parses the module as
before; so does a proto that cannot be read (None).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from hlo_doctor.hlo import HloComputation, HloInstruction, HloModule, HloShape
from hlo_doctor.hlo.frames import Frame
from hlo_doctor.hlo.navigation import key_instruction
from hlo_doctor.memory.proto import Fields, message_classes

__all__ = ["ELEMENT_TYPES", "ProtoModule", "UnwritableShape", "module_from_hlo_proto"]

ELEMENT_TYPES: dict[int, str] = {
    1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16",
    11: "f32", 12: "f64", 14: "opaque", 15: "c64", 16: "bf16", 17: "token", 18: "c128", 19: "f8e5m2",
    20: "f8e4m3fn", 21: "s4", 22: "u4", 23: "f8e4m3b11fnuz", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 28: "f8e4m3",
    29: "f8e3m4", 32: "f4e2m1fn", 33: "f8e8m0fnu",
}
"""``xla.PrimitiveType`` -> the element type as HLO text writes it (``TUPLE`` = 13 is a tuple; the types
jaxlib's ``PrimitiveType`` does not number, such as ``s2``, are read as text)."""

_TUPLE = 13


class UnwritableShape(Exception):
    """A shape the text path would write differently (raised where such a shape is first built):
    read the module as text instead."""


@cache
def _messages() -> tuple[Any, Any]:
    """``HloProto`` (its module's instructions only) and ``ShapeProto`` classes."""
    messages: list[tuple[str, Fields]] = []

    def message(name: str, fields: Fields) -> None:
        messages.append((name, fields))

    message("Layout", [("minor_to_major", 1, "i", True), ("tail_padding_alignment_in_elements", 16, "i", False)])
    message("Shape", [("element_type", 2, "e", False), ("dimensions", 3, "i", True),
                      ("tuple_shapes", 4, "Shape", True), ("layout", 5, "Layout", False),
                      ("is_dynamic_dimension", 6, "b", True)])
    message("Metadata", [("source_file", 3, "s", False), ("source_line", 4, "i", False),
                         ("stack_frame_id", 15, "i", False)])
    message("Instruction", [("name", 1, "s", False), ("opcode", 2, "s", False), ("shape", 3, "Shape", False),
                            ("metadata", 7, "Metadata", False), ("id", 35, "i", False),
                            ("called_computation_ids", 38, "i", True)])
    message("Computation", [("name", 1, "s", False), ("instructions", 2, "Instruction", True),
                            ("id", 5, "i", False), ("root_id", 6, "i", False)])
    message("FileLocation", [("file_name_id", 1, "i", False), ("function_name_id", 2, "i", False),
                             ("line", 3, "i", False)])
    message("StackFrame", [("file_location_id", 1, "i", False), ("parent_frame_id", 2, "i", False)])
    message("StackFrameIndex", [("file_names", 1, "s", True), ("function_names", 2, "s", True),
                                ("file_locations", 3, "FileLocation", True),
                                ("stack_frames", 4, "StackFrame", True)])
    message("Module", [("name", 1, "s", False), ("entry_computation_name", 2, "s", False),
                       ("computations", 3, "Computation", True), ("entry_computation_id", 6, "i", False),
                       ("stack_frame_index", 17, "StackFrameIndex", False)])
    message("HloProto", [("hlo_module", 1, "Module", False)])
    return message_classes("hlo_doctor/memory/hlo_fields.proto", "hlo_doctor.memory.fields", messages,
                           ("HloProto", "Shape"))  # type: ignore[return-value]


class _Reader:
    """One module's shapes and stacks, each distinct one built once."""

    def __init__(self, module: Any) -> None:
        self.shape_class = _messages()[1]
        self.shapes: dict[bytes, HloShape] = {}
        index = module.stack_frame_index
        self.files = list(index.file_names)
        self.functions = list(index.function_names)
        self.locations = [(loc.file_name_id, loc.function_name_id, loc.line) for loc in index.file_locations]
        self.frames = [(f.file_location_id, f.parent_frame_id) for f in index.stack_frames]
        self.stacks: dict[int, tuple[Frame, ...]] = {}

    def shape(self, proto: Any) -> HloShape:
        key = proto.SerializeToString(deterministic=True)
        hit = self.shapes.get(key)
        if hit is None:
            hit = self._shape(proto, 0)
            # Anything the text would write that is not read here (tiles, memory spaces...) is left
            # unknown by this pool, and the shape read back would not serialize to the same bytes.
            if self._known(proto).SerializeToString(deterministic=True) != key:
                raise UnwritableShape("a shape field not read here")
            self.shapes[key] = hit
        return hit

    def _shape(self, proto: Any, depth: int) -> HloShape:
        if depth > 64:
            raise UnwritableShape("a shape nested too deep")
        if proto.element_type == _TUPLE:
            return HloShape("tuple", elements=tuple(self._shape(e, depth + 1) for e in proto.tuple_shapes))
        dtype = ELEMENT_TYPES.get(proto.element_type)
        if dtype is None or proto.tuple_shapes:
            raise UnwritableShape(f"element type {proto.element_type}")
        dynamic = tuple(proto.is_dynamic_dimension)
        if dynamic and len(dynamic) != len(proto.dimensions):
            raise UnwritableShape("dynamic dimensions that do not match the dimensions")
        dims = tuple(-1 if dyn and d < 0 else d for d, dyn in zip(proto.dimensions, dynamic or
                                                                  (False,) * len(proto.dimensions), strict=True))
        if proto.layout.tail_padding_alignment_in_elements > 1:
            raise UnwritableShape("a layout's tail padding")
        layout = ",".join(str(d) for d in proto.layout.minor_to_major)
        return HloShape(dtype, dims, layout, dynamic=dynamic if any(dynamic) else ())

    def _known(self, proto: Any) -> Any:
        """A ``ShapeProto`` holding only the fields read here, copied from ``proto``."""
        out = self.shape_class(element_type=proto.element_type, dimensions=proto.dimensions,
                               is_dynamic_dimension=proto.is_dynamic_dimension)
        if proto.HasField("layout"):
            out.layout.minor_to_major.extend(proto.layout.minor_to_major)
            out.layout.tail_padding_alignment_in_elements = proto.layout.tail_padding_alignment_in_elements
        for e in proto.tuple_shapes:
            out.tuple_shapes.append(self._known(e))
        return out

    def stack(self, meta: Any) -> tuple[Frame, ...]:
        frame_id = meta.stack_frame_id
        stack: tuple[Frame, ...] = ()
        if frame_id:
            hit = self.stacks.get(frame_id)
            stack = hit if hit is not None else self._walk(frame_id)
        if not stack and meta.source_file:
            stack = (Frame(meta.source_file, meta.source_line),)
        return stack

    def _walk(self, frame_id: int) -> tuple[Frame, ...]:
        # Ids count from 1 (0: none), into every table. A stack is its frame then its parent's
        # stack: each parent's is built once and shared by every stack through it.
        chain: list[int] = []
        seen: set[int] = set()
        cur = frame_id
        while 0 < cur <= len(self.frames) and cur not in seen and cur not in self.stacks:
            seen.add(cur)
            chain.append(cur)
            cur = self.frames[cur - 1][1]
        if cur in seen:  # a malformed table loops: the frames up to the loop, kept for this id alone
            return tuple(f for f in (self._frame(i) for i in chain) if f is not None)
        stack = self.stacks.get(cur, ())
        for i in reversed(chain):
            frame = self._frame(i)
            if frame is not None:
                stack = (frame, *stack)
            self.stacks[i] = stack
        return stack

    def _frame(self, frame_id: int) -> Frame | None:
        location = self.frames[frame_id - 1][0]
        if not 0 < location <= len(self.locations):
            return None
        file_id, function_id, line = self.locations[location - 1]
        return Frame(self.files[file_id - 1] if 0 < file_id <= len(self.files) else "", line,
                     self.functions[function_id - 1] if 0 < function_id <= len(self.functions) else "")


class ProtoModule:
    """A module read from its proto on demand: an instruction is built when looked up, a fusion's
    body when the op that matters inside it is asked for (what the memory view shows of a few
    buffers costs that few). Building an instruction whose shape the text would write otherwise
    raises :class:`UnwritableShape`."""

    def __init__(self, module: Any, reader: _Reader, program_id: int | None) -> None:
        self.name: str = module.name
        self.program_id = program_id
        self._reader = reader
        self._names = {c.id: c.name for c in module.computations}
        self._protos = {c.name: c for c in module.computations}
        self._where: dict[str, tuple[Any, Any]] = {}
        for comp in module.computations:
            for inst in comp.instructions:
                self._where.setdefault(inst.name, (comp, inst))
        self._built: dict[tuple[str, str], HloInstruction] = {}
        self._bodies: dict[str, HloComputation] = {}
        self.entry_name: str = (module.entry_computation_name or self._names.get(module.entry_computation_id, "")
                                or module.computations[-1].name)

    def instruction(self, name: str) -> HloInstruction | None:
        """The instruction named so (the first of that name, as :meth:`HloModule.instruction` finds it)."""
        found = self._where.get(name)
        return None if found is None else self._instruction(*found)

    def _instruction(self, comp: Any, inst: Any) -> HloInstruction:
        key = (comp.name, inst.name)
        hit = self._built.get(key)
        if hit is None:
            stack = self._reader.stack(inst.metadata)
            hit = self._built[key] = HloInstruction(
                name=inst.name, opcode=inst.opcode, shape=self._reader.shape(inst.shape), operands=(),
                computation=comp.name, is_root=inst.id == comp.root_id,
                called_computations=tuple(self._names.get(i, "") for i in inst.called_computation_ids),
                source_file=stack[0].file if stack else "", source_line=stack[0].line if stack else 0,
                stack=stack)
        return hit

    def _computation(self, name: str, fusion_bodies: frozenset[str] = frozenset()) -> HloComputation:
        comp = self._protos[name]
        return HloComputation(name, tuple(self._instruction(comp, i) for i in comp.instructions),
                              is_entry=name == self.entry_name, is_fusion=name in fusion_bodies)

    def key_instruction(self, op: HloInstruction) -> HloInstruction:
        """:func:`hlo_doctor.hlo.navigation.key_instruction` of ``op``, on its fusion's bodies alone."""
        if op.opcode != "fusion" or not op.called_computations or op.called_computations[0] not in self._protos:
            return op
        names: list[str] = []
        todo = [op.called_computations[0]]
        while todo:
            name = todo.pop()
            if name in names or name not in self._protos:
                continue
            names.append(name)
            if name not in self._bodies:
                self._bodies[name] = self._computation(name, frozenset((name,)))
            todo.extend(i.called_computations[0] for i in self._bodies[name].instructions
                        if i.opcode == "fusion" and i.called_computations)
        bodies = HloModule(self.name, tuple(self._bodies[n] for n in names), names[0])
        return key_instruction(bodies, op)

    def whole(self) -> HloModule:
        """Every computation, as an :class:`HloModule` (what the text path's parse gives, less the
        operands and attributes)."""
        bodies = frozenset(self._names.get(i.called_computation_ids[0], "") for c in self._protos.values()
                           for i in c.instructions if i.opcode == "fusion" and i.called_computation_ids)
        return HloModule(self.name, tuple(self._computation(n, bodies) for n in self._protos), self.entry_name,
                         program_id=self.program_id)


def module_from_hlo_proto(data: bytes, *, program_id: int | None = None) -> ProtoModule | None:
    """The module of a serialized ``HloProto``, read on demand (:class:`ProtoModule`); None when
    the bytes hold no module (read it as text then)."""
    from google.protobuf.message import DecodeError

    try:
        module = _messages()[0].FromString(data).hlo_module
    except DecodeError:
        return None
    if not module.computations:
        return None
    return ProtoModule(module, _Reader(module), program_id)
