"""A fix's promise measured by running the program itself, with and without the fix (a program A/B).

Where the capture is a run directory of ``hlo-doctor profile FILE.py:FUNC`` and this machine can run
that function (same backend, jax and jaxlib; the file still as it was captured), ``verify``'s program
A/B (:mod:`hlo_doctor.verify.program`) times the step as written and a copy of its file with the fix
applied, in alternation, and its step-time statistic gives the figure: the ratio of medians with its
interval, and from it the saving per step here. This module holds that figure as a value the
promises (:mod:`.promise`) and every view read; it imports nothing of ``verify``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_doctor.core.format import fmt_duration

KIND = "program-ab/fix"
"""The measurement store's kind for a program A/B."""


@dataclass(frozen=True, slots=True)
class ProgramMeasurement:
    """One fix timed on the program itself: each side's median step (us), the ratio and its interval."""

    fix: str
    target: str
    """``step.py:step``, as the capture's run.json names it."""
    a_us: float
    b_us: float
    ratio: float
    """The fixed step's time over the original's (median ratio of paired rounds)."""
    ratio_interval: tuple[float, float]
    level: float
    """The interval's confidence (its last look's, when rounds were added until it decided)."""
    outcome: str
    """verify's step-time outcome: ``improved``, ``no change``, ``regressed`` or ``inconclusive``."""
    rounds: int
    """Measured rounds of each side."""
    steps: int
    """Calls of the step per round."""
    budget_s: float
    stopped: str
    """``decided`` or ``budget spent`` (verify's stopping rule)."""
    when: str
    lines: tuple[int, ...] = ()
    """The lines of the target's file the fix was applied at."""

    @property
    def saving_us(self) -> float:
        """What the fix saves per step here (negative: slower)."""
        return self.a_us * (1.0 - self.ratio)

    @property
    def interval_us(self) -> tuple[float, float]:
        lo, hi = self.ratio_interval
        return (self.a_us * (1.0 - hi), self.a_us * (1.0 - lo))

    @property
    def significant(self) -> bool:
        lo, hi = self.interval_us
        return lo > 0 or hi < 0

    @property
    def slower(self) -> bool:
        return self.interval_us[1] < 0

    def line(self) -> str:
        """``measured by a program A/B of step.py:step here (3 rounds x 5 steps each, decided, budget
        10 s, measured 2026-12-03): 42.1 ms -> 30.2 ms per step, x0.72 [0.66, 0.78]``."""
        at = f" at line{'s' if len(self.lines) > 1 else ''} {', '.join(map(str, self.lines))}" if self.lines else ""
        lo, hi = self.interval_us
        return (f"measured by a program A/B of {self.target}{at} on this machine ({self.rounds} rounds x "
                f"{self.steps} steps each, alternated, {self.stopped} within a {self.budget_s:g} s budget, "
                f"measured here {self.when[:10]}): {fmt_duration(self.a_us)} -> {fmt_duration(self.b_us)} per "
                f"step, x{self.ratio:.3f} [{self.ratio_interval[0]:.3f}, {self.ratio_interval[1]:.3f}] "
                f"({self.outcome}); saving {_signed(self.saving_us)} [{_signed(lo)}, {_signed(hi)}]")

    def to_dict(self) -> dict[str, object]:
        lo, hi = self.interval_us
        return {"fix": self.fix, "basis": "measured (program A/B)", "target": self.target, "lines": list(self.lines),
                "a_us": self.a_us, "b_us": self.b_us, "ratio": self.ratio, "ratio_interval": list(self.ratio_interval),
                "level": self.level, "outcome": self.outcome, "saving_us": self.saving_us, "interval_us": [lo, hi],
                "rounds": self.rounds, "steps": self.steps, "budget_s": self.budget_s, "stopped": self.stopped,
                "when": self.when}


def _signed(us: float) -> str:
    return f"-{fmt_duration(-us)}" if us < 0 else fmt_duration(us)
