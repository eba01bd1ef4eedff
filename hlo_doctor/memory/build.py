"""One program's :class:`~hlo_doctor.memory.model.ProgramMemory` from its buffer assignment and its
HLO module (which names each buffer's op, shape and source line)."""

from __future__ import annotations

from hlo_doctor.hlo import HloInstruction, HloModule, HloShape
from hlo_doctor.hlo.navigation import key_instruction
from hlo_doctor.memory.heap import HBM, MalformedHeap, replay_heap
from hlo_doctor.memory.hlo_fields import ProtoModule
from hlo_doctor.memory.model import AllocationSummary, PeakBuffer, ProgramMemory
from hlo_doctor.memory.proto import Allocation, BufferAssignment, LogicalBuffer

__all__ = ["failed_program", "program_memory"]


def _subshape(shape: HloShape, index: tuple[int, ...]) -> HloShape:
    for i in index:
        if not shape.is_tuple or i >= len(shape.elements):
            break
        shape = shape.elements[i]
    return shape


def _source(module: HloModule | ProtoModule | None, inst: HloInstruction | None) -> str:
    if module is None or inst is None:
        return ""
    if inst.opcode == "fusion":
        inst = module.key_instruction(inst) if isinstance(module, ProtoModule) else key_instruction(module, inst)
    return inst.source


class _Namer:
    """Each logical buffer's instruction, opcode, shape and line (from the module where it has them),
    each described once."""

    def __init__(self, module: HloModule | ProtoModule | None) -> None:
        self.module = module
        self._described: dict[int, tuple[str, str, str, str]] = {}

    @staticmethod
    def label(b: LogicalBuffer) -> str:
        """The instruction's name, with the shape index of a tuple's element (``fusion{1}``)."""
        name = b.instruction_name
        return name + ("{" + ",".join(str(i) for i in b.shape_index) + "}" if b.shape_index else "")

    def describe(self, b: LogicalBuffer) -> tuple[str, str, str, str]:
        hit = self._described.get(b.id)
        if hit is None:
            hit = self._described[b.id] = self._describe(b)
        return hit

    def _describe(self, b: LogicalBuffer) -> tuple[str, str, str, str]:
        name = b.instruction_name
        inst = self.module.instruction(name) if self.module is not None and name else None
        label = self.label(b)
        if inst is None:
            return label, "", "", ""
        return label, inst.opcode, _subshape(inst.shape, b.shape_index).text(), _source(self.module, inst)


def _largest(alloc: Allocation, buffers: dict[int, LogicalBuffer]) -> LogicalBuffer | None:
    best: LogicalBuffer | None = None
    for a in alloc.assigned:
        b = buffers.get(a.logical_buffer_id)
        if b is not None and b.size > (best.size if best else 0):
            best = b
    return best


def program_memory(assignment: BufferAssignment, module: HloModule | ProtoModule | None, *, name: str = "",
                   program_id: int | None = None, host: str = "",
                   runs_per_step: float | None = None) -> ProgramMemory:
    """The memory of one program; a heap trace that contradicts itself gives a program with
    ``error`` set (named, never raised)."""
    name = name or (module.name if module is not None else assignment.module_name)
    try:
        replay = replay_heap(assignment)
    except MalformedHeap as exc:
        return failed_program(name, program_id, f"malformed heap trace: {exc}", host=host)
    buffers = {b.id: b for b in assignment.logical_buffers}
    owner = {a.logical_buffer_id: alloc for alloc in assignment.allocations for a in alloc.assigned}
    namer = _Namer(module)
    hbm = [a for a in assignment.allocations if a.color == HBM]
    args = sum(a.size for a in hbm if a.is_entry_computation_parameter)
    outs = sum(a.size for a in hbm if a.maybe_live_out)
    alias = sum(a.size for a in hbm if a.is_entry_computation_parameter and a.maybe_live_out)
    consts = sum(a.size for a in hbm if a.is_constant and not a.is_entry_computation_parameter)
    temps = sum(a.size for a in hbm if not a.indefinite and not a.is_thread_local)

    at_peak: list[PeakBuffer] = []
    for bid in replay.live_at_peak:
        b = buffers[bid]
        alloc = owner[bid]
        label, opcode, shape, source = namer.describe(b)
        param = alloc.parameter_number if alloc.is_entry_computation_parameter else None
        # An argument or output counts its whole allocation, as the peak does.
        size = alloc.size if alloc.indefinite else b.size
        at_peak.append(PeakBuffer(bid, size, label, opcode, shape, alloc.category, source, param,
                                  alloc.is_entry_computation_parameter and alloc.maybe_live_out))
    at_peak.sort(key=lambda p: (-p.size_bytes, p.logical_buffer_id))

    summaries: list[AllocationSummary] = []
    for alloc in sorted(hbm, key=lambda a: a.index):
        if alloc.is_thread_local:
            continue
        big = _largest(alloc, buffers)
        label, _, shape, _ = namer.describe(big) if big is not None else ("", "", "", "")
        held = tuple(dict.fromkeys(namer.label(buffers[a.logical_buffer_id]) for a in alloc.assigned
                                   if a.logical_buffer_id in buffers))
        summaries.append(AllocationSummary(
            alloc.index, alloc.size, alloc.category,
            alloc.parameter_number if alloc.is_entry_computation_parameter else None,
            alloc.maybe_live_out, label, shape, held))
    peak_inst = replay.timeline_instructions[replay.peak_position] if replay.timeline_instructions else ""
    return ProgramMemory(
        module=name, program_id=program_id, peak_bytes=replay.peak_bytes,
        heap_peak_bytes=replay.heap_peak_bytes, argument_bytes=args, output_bytes=outs, alias_bytes=alias,
        temporary_bytes=temps, constant_bytes=consts, peak_position=replay.peak_position,
        peak_instruction=peak_inst, buffers_at_peak=tuple(at_peak), allocations=tuple(summaries),
        heap=replay.timeline, heap_instructions=replay.timeline_instructions,
        runs_per_step=runs_per_step, host=host)


def failed_program(name: str, program_id: int | None, error: str, *, host: str = "") -> ProgramMemory:
    """A program whose buffer assignment could not be read: zero figures and why."""
    return ProgramMemory(name, program_id, 0, 0, 0, 0, 0, 0, 0, 0, "", (), host=host, error=error)
