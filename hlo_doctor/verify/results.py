"""The values every kind of target reports: a check, the HLO evidence of a capture, a removed op."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hlo_doctor.core.model import Finding


@dataclass(frozen=True, slots=True)
class Check:
    """One of the checks: passed or not, with the figure that decided it."""

    number: int
    name: str
    passed: bool
    figure: str
    """The deciding figure, for the table (``0 compiles``, ``x1.02 (bound 1.25)``)."""
    detail: str = ""
    """Why, in a sentence (JAX's reason for a compile, the first differing token...)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class RemovedOp:
    """A wasteful op found in the baseline's trace, and what became of it in the treatment's trace.

    ``status``: ``gone`` (the op no longer runs: the aliasing copy, the convert program),
    ``narrowed`` (the argmax still runs but no rule flags it: it reads the narrow dtype) or
    ``still there``.
    """

    code: str
    op: str
    module: str
    shape: str
    time_per_step_us: float | None
    """Time per step in the baseline's trace."""
    status: str
    treatment_time_per_step_us: float | None = None
    """The op's time per step in the treatment's trace (narrowed / still there), None when gone."""

    @property
    def removed(self) -> bool:
        return self.status == "gone"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class HloEvidence:
    """What hlo-doctor's own rules and HLO reading say about one variant's captured trace."""

    run_dir: str
    findings: tuple[Finding, ...]
    rules_run: tuple[str, ...]
    argmax_reads: tuple[str, ...]
    """``module: dtype[shape]`` read by each argmax (e.g. ``jit_sample: bf16[64,256000]``)."""
    step_time_us: float | None
    error: str = ""
    """Non-empty when the capture or the diagnosis failed (the check then fails with this reason)."""
    argmax_times: tuple[tuple[str, float], ...] = ()
    """(module, time per step in us) of the entry op holding each argmax, from the op stats."""
    peaks: tuple[tuple[str, int], ...] = ()
    """(module, peak bytes) of each program of the capture's steps (the largest of a module's
    compiles), from the buffer assignments the backend compiled: what the side holds at once."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir, "findings": [f.to_dict() for f in self.findings],
            "rules_run": list(self.rules_run), "argmax_reads": list(self.argmax_reads),
            "argmax_times_us": dict(self.argmax_times), "step_time_us": self.step_time_us, "error": self.error,
            "peak_bytes": dict(self.peaks),
        }


@dataclass(frozen=True, slots=True)
class Stopping:
    """How many rounds were measured and why no more: the settings' count, the interval decided, or
    the time budget ran out."""

    rounds: int
    """Rounds measured per variant (pairs of rounds)."""
    initial_rounds: int
    """The settings' round count (measured before the first look)."""
    budget_s: float | None
    """Seconds the measured rounds may take in all; None = exactly ``initial_rounds``."""
    spent_s: float
    """Seconds the measured rounds took."""
    decided: bool
    """With a budget: whether the last look's verdict was other than inconclusive (False without one)."""
    looks: int = 1
    """How many times the verdict was computed (1 without a budget)."""

    @property
    def reason(self) -> str:
        """``fixed`` (no budget), ``decided`` or ``budget spent``."""
        if self.budget_s is None:
            return "fixed"
        return "decided" if self.decided else "budget spent"

    def describe(self) -> str:
        """One phrase for the check's figure: ``decided at round 8 (budget 120 s, 41 s used)``."""
        if self.budget_s is None:
            return f"{self.rounds} rounds a side"
        used = f"budget {self.budget_s:g} s, {self.spent_s:.0f} s used"
        if self.decided:
            return f"decided at round {self.rounds} ({used})"
        return f"budget spent at round {self.rounds} ({used})"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "reason": self.reason, "text": self.describe()}
