"""Which stage of compilation an HLO module was printed at: as lowered, or optimized by XLA.

Rules read the two differently. Before XLA's passes a ``convert`` feeding a ``reduce`` is usually
fused into it later (no widened tensor is ever written), and a ``copy`` may be the user's own; after
them, what is in the text is what runs. The stage is told by, in order: the dump file's suffix
(``.before_optimizations`` / ``.after_optimizations``, also accepted in the module name),
``is_scheduled=true`` in the header (only a compiled module is scheduled), and fusion computations
(XLA's fusion passes have run). A module with none of these is taken as unoptimized.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hlo_doctor.hlo import HloModule

OPTIMIZED = "optimized"
UNOPTIMIZED = "unoptimized"


@dataclass(frozen=True, slots=True)
class Stage:
    """A module's stage and what told it."""

    name: str
    """``optimized`` or ``unoptimized``."""
    reason: str
    """``is_scheduled=true``, ``fusions present``, ``name ends .before_optimizations``..."""

    @property
    def optimized(self) -> bool:
        return self.name == OPTIMIZED

    def evidence(self) -> str:
        """One evidence line: ``stage: unoptimized HLO (no fusion, not scheduled)``."""
        return f"stage: {self.name} HLO ({self.reason})"


def stage_of(module: HloModule, origin: str = "") -> Stage:
    """The stage of ``module``; ``origin`` is the file it was read from, when one file."""
    for where in (origin, module.name):
        low = where.lower()
        if "before_optimizations" in low:
            return Stage(UNOPTIMIZED, "dump named before_optimizations")
        if "after_optimizations" in low:
            return Stage(OPTIMIZED, "dump named after_optimizations")
    if module.is_scheduled:
        return Stage(OPTIMIZED, "is_scheduled=true")
    if module.has_fusions:
        return Stage(OPTIMIZED, "fusions present")
    return Stage(UNOPTIMIZED, "no fusion, not scheduled: as lowered, before XLA's passes")


def stages_line(modules: Iterable[HloModule], origin: str = "") -> str:
    """``stage: 2 of 3 modules are unoptimized HLO (...)``, or empty when every module is optimized."""
    mods = list(modules)
    raw = [m for m in mods if not stage_of(m, origin).optimized]
    if not raw:
        return ""
    names = ", ".join(m.name for m in raw[:3]) + (", ..." if len(raw) > 3 else "")
    return (f"stage: {len(raw)} of {len(mods)} module{'s' if len(mods) != 1 else ''} unoptimized "
            f"({names}): as lowered, before XLA's fusion; findings on them say so")
