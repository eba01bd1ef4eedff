"""A fix's promise measured by running the program itself, with and without the fix (a program A/B).

Where the capture is a run directory of ``hlo-doctor profile FILE.py:FUNC`` and this machine can run
that function (same backend, jax and jaxlib; the file still as it was captured), ``verify``'s program
A/B (:mod:`hlo_doctor.verify.program`) times the step as written and a copy of its file with the fix
applied, in alternation, and its step-time statistic gives the figure: the ratio of medians with its
interval, and from it the saving per step here. This module holds that figure as a value the
promises (:mod:`.promise`) and every view read; it imports nothing of ``verify``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.core.format import fmt_duration
from hlo_doctor.core.model import Finding
from hlo_doctor.core.sources import file_sha256, recorded
from hlo_doctor.lint.measurement import DEFAULT_BUDGET_S, Measurement, versions_here

KIND = "program-ab/fix"
"""The measurement store's kind for a program A/B."""
BUDGET_S = DEFAULT_BUDGET_S
"""Seconds the measured rounds may take in all (verify's ``--budget``): short, beside a diagnosis."""
ROUNDS, STEPS, WARMUP = 3, 5, 2
"""Rounds per side before the first look, calls per round, untimed calls per side."""
OUTCOMES = ("improved", "no change", "regressed", "inconclusive")
"""verify's step-time outcomes, stored by index (side ``outcome``) with the rounds."""
Measure = Callable[[str, str, Path, Sequence[Finding], str, float], "Measurement | str"]
"""``(fix, /abs/FILE.py:FUNC, file, the fix's findings, store key, budget) -> the stored figure or why
not``: verify's program A/B (:mod:`hlo_doctor.verify.program.promise`), passed in by the caller so
that a diagnosis that reuses a stored figure never imports verify."""


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
        # A run of a fixed count of rounds (verify's own) has no budget to name.
        within = f"{self.stopped} within a {self.budget_s:g} s budget" if self.budget_s > 0 else self.stopped
        return (f"measured by a program A/B of {self.target}{at} on this machine ({self.rounds} rounds x "
                f"{self.steps} steps each, alternated, {within}, "
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


def program_target(capture: Path) -> tuple[str, str, Path] | str | None:
    """(target as run.json names it, ``/abs/FILE.py:FUNC`` to run, the file) of a capture this machine
    can time; the one-line reason where it cannot; None where the capture is not of a program target."""
    from hlo_doctor.lint.store import run_doc, run_folder

    folder = run_folder(capture)
    doc = run_doc(folder)
    if doc is None:
        return None
    target = doc.get("target")
    if not isinstance(target, str) or ":" not in target or not target.rpartition(":")[0].endswith(".py"):
        return None
    path, _, func = target.rpartition(":")
    other = other_jax(doc)
    if other:
        return other
    record = recorded(folder)
    tail = Path(path).parts
    named = [k for k in record if Path(k).parts[-len(tail):] == tail]
    if len(named) != 1:
        return f"the capture's run.json does not fingerprint {path}, so this machine cannot tell it is unchanged"
    file = Path(named[0])
    now = file_sha256(file)
    if now is None:
        return f"{file} is gone since the capture"
    if now != record[named[0]]:
        return f"{file} changed since the capture: timing it now would not measure the captured program"
    return target, f"{file}:{func}", file


def from_measurement(fix: str, target: str, lines: tuple[int, ...], m: Measurement) -> ProgramMeasurement | str:
    """A stored program A/B as the figure every view prints: each side's median step over its stored
    step times (us), the ratio and its interval as verify's statistic gave them, its outcome."""
    base, treat = m.side("baseline"), m.side("treatment")
    rounds = m.reps
    if not rounds or not base or len(base) % rounds or len(treat) != len(base):
        return "the stored program A/B is not whole rounds; --remeasure measures it again"
    code = int(m.side("outcome")[0]) if m.side("outcome") else len(OUTCOMES) - 1
    return ProgramMeasurement(
        fix=fix, target=target, a_us=float(statistics.median(base)), b_us=float(statistics.median(treat)),
        ratio=m.median, ratio_interval=(m.low, m.high), level=m.level,
        outcome=OUTCOMES[code] if 0 <= code < len(OUTCOMES) else OUTCOMES[-1], rounds=rounds,
        steps=len(base) // rounds, budget_s=m.budget_s or 0.0, stopped=m.stopped, when=m.when, lines=lines)


def other_jax(doc: dict[str, object]) -> str:
    """Why a capture's run.json (``doc``) names a jax/jaxlib this machine does not have; "" when it has them."""
    versions = doc.get("versions")
    if not isinstance(versions, dict):
        versions = {}
    want = (str(versions.get("jax", "")), str(versions.get("jaxlib", "")))
    have = versions_here()
    if want == have:
        return ""
    return (f"the capture ran jax {want[0] or '?'} (jaxlib {want[1] or '?'}), this machine has jax {have[0] or '-'} "
            f"(jaxlib {have[1] or '-'})")
