"""A program's buffer assignment from serialized protos: an ``HloProto`` (field 3 of what a trace's
metadata plane stores beside the module) or a bare ``BufferAssignmentProto`` (what jax's
``compiled.memory_analysis().serialized_buffer_assignment_proto`` gives).

jaxlib ships no Python classes for XLA's ``hlo.proto``, so the fields read here are declared once
in a private descriptor pool (field numbers as ``xla/service/hlo.proto`` gives them); every other
field stays unknown, which protobuf skips. What comes out is plain frozen values
(:class:`BufferAssignment`), checked for what the heap simulation relies on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from hlo_doctor.core.errors import InputError

__all__ = [
    "Allocation", "Assigned", "BufferAssignment", "HeapEvent", "LogicalBuffer", "assignment_from_bytes",
    "assignment_from_hlo_proto", "instruction_names",
]

ALLOC, FREE, SHARE_WITH = 0, 1, 2
"""``HeapSimulatorTrace.Event.Kind``."""


@dataclass(frozen=True, slots=True)
class LogicalBuffer:
    """``LogicalBufferProto``: one value's buffer, defined by an instruction at a shape index."""

    id: int
    size: int
    instruction_id: int
    shape_index: tuple[int, ...]
    color: int
    instruction_name: str = ""
    """The defining instruction's name (from the module's instruction ids; empty when unknown)."""


@dataclass(frozen=True, slots=True)
class Assigned:
    """One logical buffer placed in an allocation."""

    logical_buffer_id: int
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """``BufferAllocationProto``: one slab the runtime allocates for the program."""

    index: int
    size: int
    is_thread_local: bool
    is_tuple: bool
    is_entry_computation_parameter: bool
    is_constant: bool
    parameter_number: int
    maybe_live_out: bool
    color: int
    assigned: tuple[Assigned, ...]

    @property
    def indefinite(self) -> bool:
        """Live for the whole program (arguments, outputs, constants): outside the heap simulation,
        added to its peak as xprof's memory viewer adds them. Thread-local buffers (a reducer's
        scalars, on the executing thread's stack) are neither in the heap nor in its peak."""
        return self.is_entry_computation_parameter or self.is_constant or self.maybe_live_out

    @property
    def category(self) -> str:
        """``argument``, ``output``, ``thread-local``, ``constant`` or ``temporary`` (in xprof's order)."""
        if self.is_entry_computation_parameter:
            return "argument"
        if self.maybe_live_out:
            return "output"
        if self.is_thread_local:
            return "thread-local"
        if self.is_constant:
            return "constant"
        return "temporary"


@dataclass(frozen=True, slots=True)
class HeapEvent:
    """``HeapSimulatorTrace.Event``."""

    kind: int
    buffer_id: int
    instruction_name: str
    share_with_canonical_id: int


@dataclass(frozen=True, slots=True)
class BufferAssignment:
    """The buffer assignment of one program (``BufferAssignmentProto``)."""

    logical_buffers: tuple[LogicalBuffer, ...]
    allocations: tuple[Allocation, ...]
    heap_traces: tuple[tuple[HeapEvent, ...], ...]
    module_name: str = ""

    @property
    def is_empty(self) -> bool:
        return not self.allocations


Fields = list[tuple[str, int, str, bool]]
"""A message's fields: (name, number, kind, repeated); kind ``i`` int64, ``b`` bool, ``s`` string,
``e`` an enum read as int32, or the name of another message of the same file."""


def message_classes(file_name: str, package: str, messages: list[tuple[str, Fields]],
                    wanted: tuple[str, ...]) -> tuple[Any, ...]:
    """The classes named ``wanted`` of a proto file declared here, in a descriptor pool of its own.

    Each reader declares only the fields it reads (unknown fields are skipped by the runtime), so no
    generated module and no other pool is touched.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    types = {"i": F.TYPE_INT64, "b": F.TYPE_BOOL, "s": F.TYPE_STRING, "e": F.TYPE_INT32}
    for name, fields in messages:
        m = file.message_type.add(name=name)
        for field_name, number, kind, repeated in fields:
            f = m.field.add(name=field_name, number=number,
                            label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if kind in types:
                f.type = types[kind]
            else:
                f.type = F.TYPE_MESSAGE
                f.type_name = f".{package}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{n}")) for n in wanted)


@cache
def _messages() -> tuple[Any, ...]:
    """``HloProto`` and ``BufferAssignmentProto`` classes holding only the fields read here."""
    messages: list[tuple[str, Fields]] = []

    def message(name: str, fields: Fields) -> None:
        messages.append((name, fields))

    message("Instruction", [("name", 1, "s", False), ("opcode", 2, "s", False), ("id", 35, "i", False)])
    message("Computation", [("name", 1, "s", False), ("instructions", 2, "Instruction", True)])
    message("Module", [("name", 1, "s", False), ("computations", 3, "Computation", True)])
    message("Location", [("instruction_name", 2, "s", False), ("shape_index", 3, "i", True),
                         ("instruction_id", 4, "i", False)])
    message("LogicalBuffer", [("id", 1, "i", False), ("size", 2, "i", False), ("defined_at", 3, "Location", False),
                              ("color", 4, "i", False)])
    message("Assigned", [("logical_buffer_id", 1, "i", False), ("offset", 2, "i", False), ("size", 3, "i", False)])
    message("Allocation", [("index", 1, "i", False), ("size", 2, "i", False), ("is_thread_local", 3, "b", False),
                           ("is_entry_computation_parameter", 5, "b", False), ("parameter_number", 6, "i", False),
                           ("maybe_live_out", 7, "b", False), ("color", 8, "i", False),
                           ("assigned", 9, "Assigned", True), ("is_tuple", 11, "b", False),
                           ("is_constant", 12, "b", False)])
    message("Event", [("kind", 1, "e", False), ("buffer_id", 2, "i", False), ("computation_name", 3, "s", False),
                      ("instruction_name", 4, "s", False), ("share_with_canonical_id", 5, "i", False)])
    message("HeapTrace", [("events", 1, "Event", True)])
    message("Assignment", [("logical_buffers", 1, "LogicalBuffer", True),
                           ("buffer_allocations", 3, "Allocation", True),
                           ("heap_simulator_traces", 4, "HeapTrace", True)])
    message("HloProto", [("hlo_module", 1, "Module", False), ("buffer_assignment", 3, "Assignment", False)])
    return message_classes("hlo_doctor/memory/buffer_assignment.proto", "hlo_doctor.memory", messages,
                           ("HloProto", "Assignment", "Module"))


def assignment_from_hlo_proto(data: bytes, *, origin: str = "") -> BufferAssignment | None:
    """The buffer assignment stored in a serialized ``HloProto``; None when it holds none.

    Raises :class:`InputError` naming ``origin`` when the bytes are no ``HloProto`` or the
    assignment contradicts itself (a buffer no allocation or instruction knows).
    """
    from google.protobuf.message import DecodeError

    hlo_proto = _messages()[0]
    try:
        msg = hlo_proto.FromString(data)
    except DecodeError as exc:
        raise InputError(f"{origin or 'HLO proto'}: not a serialized HloProto ({exc})",
                         "capture it again; the trace's metadata plane is damaged") from exc
    if not msg.HasField("buffer_assignment") or not msg.buffer_assignment.buffer_allocations:
        return None
    names = {inst.id: inst.name for comp in msg.hlo_module.computations for inst in comp.instructions}
    return _assignment(msg.buffer_assignment, names, msg.hlo_module.name, origin)


def assignment_from_bytes(data: bytes, instruction_names: dict[int, str] | None = None, *,
                          module_name: str = "", origin: str = "") -> BufferAssignment:
    """A serialized ``BufferAssignmentProto`` (jax's ``serialized_buffer_assignment_proto``).

    ``instruction_names`` maps instruction ids to names where the caller knows them (the heap
    events name their instruction themselves).
    """
    from google.protobuf.message import DecodeError

    assignment = _messages()[1]
    try:
        msg = assignment.FromString(data)
    except DecodeError as exc:
        raise InputError(f"{origin or 'buffer assignment'}: not a serialized BufferAssignmentProto ({exc})",
                         "pass compiled.memory_analysis().serialized_buffer_assignment_proto") from exc
    return _assignment(msg, instruction_names or {}, module_name, origin)


def instruction_names(module_proto: bytes) -> dict[int, str]:
    """Instruction id -> name of a serialized ``HloModuleProto`` (empty when it cannot be read)."""
    from google.protobuf.message import DecodeError

    try:
        msg = _messages()[2].FromString(module_proto)
    except DecodeError:
        return {}
    return {inst.id: inst.name for comp in msg.computations for inst in comp.instructions}


def _assignment(msg: Any, names: dict[int, str], module_name: str, origin: str) -> BufferAssignment:
    # A heap event names its instruction; it names the buffers' instructions where ids are unknown.
    event_names: dict[int, str] = {}
    for trace in msg.heap_simulator_traces:
        for e in trace.events:
            if e.kind == ALLOC:
                event_names.setdefault(e.buffer_id, e.instruction_name)
    buffers = tuple(
        LogicalBuffer(b.id, b.size, b.defined_at.instruction_id, tuple(b.defined_at.shape_index), b.color,
                      names.get(b.defined_at.instruction_id) or b.defined_at.instruction_name
                      or event_names.get(b.id, ""))
        for b in msg.logical_buffers)
    known = {b.id for b in buffers}
    allocations = []
    for a in msg.buffer_allocations:
        assigned = tuple(Assigned(x.logical_buffer_id, x.offset, x.size) for x in a.assigned)
        unknown = [x.logical_buffer_id for x in assigned if x.logical_buffer_id not in known]
        if unknown or a.size < 0:
            what = f"buffer {unknown[0]}" if unknown else f"size {a.size}"
            raise InputError(f"{origin or module_name}: allocation {a.index} holds {what}, which the "
                             "buffer assignment does not define", "capture it again with the same jaxlib")
        allocations.append(Allocation(a.index, a.size, a.is_thread_local, a.is_tuple,
                                      a.is_entry_computation_parameter, a.is_constant, a.parameter_number,
                                      a.maybe_live_out, a.color, assigned))
    traces = tuple(tuple(HeapEvent(int(e.kind), e.buffer_id, e.instruction_name, e.share_with_canonical_id)
                         for e in t.events) for t in msg.heap_simulator_traces)
    return BufferAssignment(buffers, tuple(allocations), traces, module_name)
