"""The heap of one program over its program order, replayed from the heap simulator's trace.

XLA's buffer assignment records the heap simulator's events (alloc, free, share-with) for the
temporaries; arguments, outputs, constants and thread-local buffers live for the whole program and
stand outside it. The peak is the simulated heap's highest point plus those, which is how xprof's
memory viewer (``hlo_proto_to_memory_visualization_utils.cc``) counts it: the same trace chosen, the
same reference counts for shared buffers, the same buffers listed at the peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_doctor.memory.proto import ALLOC, FREE, SHARE_WITH, Allocation, BufferAssignment, LogicalBuffer

__all__ = ["HeapReplay", "MalformedHeap", "replay_heap"]

HBM = 0
"""Memory color 0: the device's main memory (HBM; host RAM on XLA:CPU)."""


class MalformedHeap(ValueError):
    """The heap trace contradicts itself (a buffer freed twice, a negative heap)."""


@dataclass(frozen=True, slots=True)
class HeapReplay:
    """What replaying one program's heap trace gives."""

    heap_peak_bytes: int
    """The simulated heap's highest point (temporaries only)."""
    indefinite_bytes: int
    """Arguments, outputs, constants and thread-local buffers: live for the whole program."""
    peak_position: int
    """The event (program order) at which the heap first reached its peak; 0 without a trace."""
    timeline: tuple[int, ...]
    """Simulated heap bytes before each event, and after the last (temporaries only)."""
    timeline_instructions: tuple[str, ...]
    """The instruction each event belongs to (empty for the final point)."""
    live_at_peak: tuple[int, ...]
    """Logical buffer ids live at the peak: the whole-program ones, then the heap's in program order."""

    @property
    def peak_bytes(self) -> int:
        return self.heap_peak_bytes + self.indefinite_bytes


def _allocation_of(assignment: BufferAssignment) -> dict[int, Allocation]:
    return {a.logical_buffer_id: alloc for alloc in assignment.allocations for a in alloc.assigned}


def _trace_index(assignment: BufferAssignment, owner: dict[int, Allocation],
                 sizes: dict[int, LogicalBuffer], color: int) -> int:
    """The heap trace of ``color``: that of its first temporary allocation, else the trace with the
    most events of that color (xprof's choice; the trace's own allocation index is not trusted)."""
    trace_of: dict[int, int] = {}
    for i, events in enumerate(assignment.heap_traces):
        if events and events[0].buffer_id in owner:
            trace_of[owner[events[0].buffer_id].index] = i
    for alloc in sorted(assignment.allocations, key=lambda a: a.index):
        if alloc.color == color and not alloc.indefinite and alloc.index in trace_of:
            return trace_of[alloc.index]
    best, best_count = -1, 0
    for i, events in enumerate(assignment.heap_traces):
        count = sum(1 for e in events if e.buffer_id in owner and sizes[e.buffer_id].color == color)
        if count > best_count:
            best, best_count = i, count
    return best


def replay_heap(assignment: BufferAssignment, color: int = HBM) -> HeapReplay:
    """Replay the heap of ``color``; :class:`MalformedHeap` when the trace contradicts itself."""
    owner = _allocation_of(assignment)
    buffers = {b.id: b for b in assignment.logical_buffers if b.id in owner}

    indefinite_ids: list[int] = []
    indefinite_bytes = 0
    for alloc in assignment.allocations:
        if alloc.color != color or not alloc.indefinite:
            continue
        # An argument or output allocation holds several buffers (a tuple's pieces, aliases): the
        # largest names it, and the allocation's size is what it costs.
        best: LogicalBuffer | None = None
        for a in alloc.assigned:
            lb = buffers.get(a.logical_buffer_id)
            if lb is not None and lb.size > (best.size if best else 0):
                best = lb
        if best is not None:
            indefinite_ids.append(best.id)
            indefinite_bytes += alloc.size

    index = _trace_index(assignment, owner, buffers, color)
    if index < 0:
        return HeapReplay(0, indefinite_bytes, 0, (0,), ("",), tuple(indefinite_ids))

    refs: dict[int, int] = {}
    canonical: dict[int, int] = {}
    display: dict[int, int] = {}

    def root(b: int) -> int:
        while b in canonical:
            b = canonical[b]
        return b

    heap = peak = position = 0
    live: list[int] = []
    peak_live: list[int] = []
    peak_display: dict[int, int] = {}
    timeline: list[int] = []
    names: list[str] = []
    seen_allocations: set[int] = set()

    def grow(b: int) -> None:
        nonlocal heap, peak, position, peak_live, peak_display
        live.append(b)
        heap += buffers[b].size
        if heap > peak:
            peak, position = heap, len(timeline) - 1
            peak_live, peak_display = list(live), dict(display)

    for e in assignment.heap_traces[index]:
        timeline.append(heap)
        names.append(e.instruction_name)
        b = e.buffer_id
        if b not in buffers:
            continue
        seen_allocations.add(owner[b].index)
        if e.kind == ALLOC:
            r = root(b)
            refs[r] = refs.get(r, 0) + 1
            grow(b)
        elif e.kind == FREE:
            r = root(b)
            refs[r] = refs.get(r, 0) - 1
            if refs[r] < 0:
                raise MalformedHeap(f"buffer {b} is freed more often than allocated")
            if refs[r] == 0:
                while r in live:
                    live.remove(r)
                heap -= buffers[r].size
                if heap < 0:
                    raise MalformedHeap(f"the heap falls below zero at event {len(timeline) - 1}")
        elif e.kind == SHARE_WITH:
            c = e.share_with_canonical_id
            if c not in buffers:
                continue
            canonical[b] = c
            r = root(c)
            refs[r] = refs.get(r, 0) + 1
            if refs[r] == 1:  # sharing a buffer already freed: its memory is taken again
                display[r] = b
                grow(r)
        else:
            raise MalformedHeap(f"unknown heap event kind {e.kind}")
    timeline.append(heap)
    names.append("")
    if len(seen_allocations) > 1:
        raise MalformedHeap(f"the heap trace spans {len(seen_allocations)} allocations, not one")
    at_peak = tuple(indefinite_ids) + tuple(peak_display.get(b, b) for b in peak_live)
    return HeapReplay(peak, indefinite_bytes, position, tuple(timeline), tuple(names), at_peak)
