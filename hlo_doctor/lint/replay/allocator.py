"""The allocator's two states, for the replay's second child (:mod:`.run`).

glibc hands an array of 128 KiB or more out as a fresh mapping until one of that size has been freed,
then reuses such arrays (its threshold follows the largest freed one, up to 32 MiB); larger ones are
always mapped fresh. A side that makes a large array each step is several times slower when every page
of it is faulted in afresh, so a saving measured in one process can differ from another's. The replay
times its sides a second time with the threshold fixed low (:data:`FRESH_PAGES_ENV`), where that state
can decide (:func:`allocator_state_matters`); :class:`FreshPages` holds what it measured.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from hlo_doctor.lint.replay.plan import ReplayPlan

FAULTS_NOTED = 256
"""The difference in minor page faults a step between the sides (1 MiB of 4 KiB pages) from which the
line says so: where one side allocates a large array fresh each step, its time follows the allocator's
state, which differs by process (a judge in another process measured the same fix 1.9 and 9.7 ms)."""
FRESH_PAGES_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}
"""The second child's allocator (glibc): every buffer of 128 KiB or more mapped when it is made and
unmapped when it is freed, the threshold fixed (not raised by the frees), so that a side that makes a
large array each step pays its pages every step. The first child runs with the allocator as it is,
where glibc soon reuses such arrays (its threshold follows the largest freed one up to 32 MiB). A
process of the user's may be in either state, and a step's time follows it (a judge in fresh
processes measured one fix at 1.9 and 9.7 ms a step, faulting or not): the promise's range holds
both children's intervals."""
REUSED_BYTES = (128 * 1024, 32 * 1024 * 1024)
"""The array sizes glibc either maps fresh or reuses, as its state has it: from its threshold's start
(128 KiB) up to the most its threshold rises to on a 64-bit machine (32 MiB); smaller ones always come
from its heap, larger ones are always mapped."""
PAGE_BYTES = 4096


def allocator_state_matters(p: ReplayPlan) -> bool:
    """Whether the programs make, each run, at least :data:`FAULTS_NOTED` pages of arrays whose pages
    the allocator's state decides (:data:`REUSED_BYTES`): only then is the second child run."""
    lo, hi = REUSED_BYTES
    made = 0
    for m in p.modules:
        for inst in m.entry.instructions:
            if inst.opcode in _NO_BUFFER:
                continue
            shapes = list(inst.shape.elements) if inst.shape.is_tuple else [inst.shape]
            made += sum(n for n in (sh.nbytes for sh in shapes if not sh.is_tuple) if lo <= n < hi)
    return made >= FAULTS_NOTED * PAGE_BYTES


_NO_BUFFER = frozenset({"parameter", "tuple", "get-tuple-element", "bitcast", "constant"})
"""Entry instructions that make no array of their own in a run."""


@dataclass(frozen=True, slots=True)
class FreshPages:
    """The replay timed again in a child whose allocator maps every large buffer fresh."""

    a_us: float
    b_us: float
    saving_us: float
    interval_us: tuple[float, float]
    pairs: int
    a_faults: float | None = None
    b_faults: float | None = None

    def to_dict(self, promise_us: float | None) -> dict[str, object]:
        return {"env": dict(FRESH_PAGES_ENV), "here_a_us": self.a_us, "here_b_us": self.b_us,
                "here_saving_us": self.saving_us, "here_interval_us": list(self.interval_us), "pairs": self.pairs,
                "promise_us": promise_us, "here_a_faults_per_step": self.a_faults,
                "here_b_faults_per_step": self.b_faults}


def faults_per_step(doc: dict[str, object]) -> dict[str, float | None]:
    """Each side's median minor page faults per step over its timings (None: not counted)."""
    out: dict[str, float | None] = {}
    for side in ("a", "b"):
        v = doc.get(f"{side}_faults")
        out[side] = round(statistics.median(v), 1) if isinstance(v, list) and v else None
    return out
