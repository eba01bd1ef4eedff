"""What a program's peak would be with one temporary resized: the heap over program order replayed
with that buffer's bytes changed over its live range (the fix a memory rule proposes), read from the
heap a :class:`~hlo_doctor.memory.model.ProgramMemory` keeps."""

from __future__ import annotations

from collections.abc import Sequence

from hlo_doctor.memory.model import ProgramMemory

__all__ = ["live_range", "peak_with", "peak_with_resized"]


def live_range(pm: ProgramMemory, instruction: str, size: int) -> tuple[int, int] | None:
    """(alloc, free) event indices of the temporary ``instruction`` defines: the first event of that
    instruction that grows the heap by ``size``, and the first later event that shrinks it by
    ``size`` (the end of the program when none does). None when the heap shows no such event."""
    heap = pm.heap
    for i in range(len(heap) - 1):
        if pm.heap_instructions[i] == instruction and heap[i + 1] - heap[i] == size:
            end = next((j for j in range(i + 1, len(heap) - 1) if heap[j + 1] - heap[j] == -size), len(heap) - 1)
            return i, end
    return None


def peak_with_resized(pm: ProgramMemory, instruction: str, size: int, new_size: int, *,
                      beside: int = 0) -> int | None:
    """The program's peak with the temporary ``instruction`` (``size`` bytes) holding ``new_size``
    instead, and ``beside`` more bytes live just before and as it is made (an input slice the fix
    makes for it); None when the heap does not show the buffer (no heap trace, or no event of it)."""
    return peak_with(pm, ((instruction, size, new_size),), beside=beside)


def peak_with(pm: ProgramMemory, changes: Sequence[tuple[str, int, int]], *, beside: int = 0) -> int | None:
    """The program's peak with each temporary of ``changes`` (instruction, bytes, new bytes) resized
    over its live range, ``beside`` more bytes live as the first is made; None when the heap does
    not show the first one (changes after it that it does not show are left as they are)."""
    spans = [(live_range(pm, name, size), size - new) for name, size, new in changes]
    first = spans[0][0] if spans else None
    if first is None:
        return None
    top = 0
    for k, v in enumerate(pm.heap):
        for span, less in spans:
            if span is not None and span[0] < k <= span[1]:
                v -= less
        if k in (first[0], first[0] + 1):
            v += beside
        top = max(top, v)
    return top + pm.indefinite_bytes
