"""Device memory per program, from the buffer assignments XLA records.

A capture's xplane keeps, beside each program's HLO, its buffer assignment (``HloProto`` field 3:
logical buffers, allocations, the heap simulator's trace); jax gives the same for any program it
compiles (``compiled.memory_analysis()``). From them: each program's peak (the simulated heap's
highest point plus what lives for the whole program, as xprof's memory viewer counts it), its
arguments, outputs, donated (aliased) bytes and temporaries, the buffers live at the peak with their
op, shape and source line, and the heap over program order. Rules see it through
:class:`hlo_doctor.lint.Context` (``ctx.memory``).
"""

from __future__ import annotations

from hlo_doctor.memory.model import AllocationSummary, KvCache, MemoryReport, PeakBuffer, ProgramMemory
from hlo_doctor.memory.read import (
    NO_ASSIGNMENTS,
    memory_from_protos,
    memory_of_compiled,
    read_memory,
    runs_per_step,
)
from hlo_doctor.memory.whatif import live_range, peak_with, peak_with_resized

__all__ = [
    "NO_ASSIGNMENTS", "AllocationSummary", "KvCache", "MemoryReport", "PeakBuffer", "ProgramMemory", "memory_from_protos",
    "live_range", "memory_of_compiled", "peak_with", "peak_with_resized", "read_memory", "runs_per_step",
]
