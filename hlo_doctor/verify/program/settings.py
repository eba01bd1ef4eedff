"""What ``verify FILE.py:FUNC`` compares and how hard it measures: :class:`ProgramSettings` and their checks.

The checks run before anything is loaded or measured, so that a run which could not decide is refused
at once (exit 2) instead of after minutes of measuring.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.verify import settings as shared

DEFAULT_STEPS = 10
"""Calls of the step function per measured round."""
DEFAULT_WARMUP = 2
"""Untimed calls of each side before the rounds (the first compiles every program the step runs)."""
DEFAULT_PROFILE_STEPS = 3
"""Steps captured per side after the rounds, for the findings and the removed ops."""


def min_rounds() -> int:
    """The fewest rounds per side the statistics can test: below it every verdict is "inconclusive".

    The step-time verdict compares the sides pair of rounds by pair of rounds
    (:func:`hlo_doctor.verify.stats.compare_rounds`), which tests only from ``MIN_PAIRS`` pairs on.
    """
    # Imported here: verify's statistics load numpy and scipy.
    from hlo_doctor.verify.stats import MIN_PAIRS

    return MIN_PAIRS


@dataclass(frozen=True, slots=True)
class ProgramSettings:
    """Two step functions (``FILE.py:FUNC`` and a fixed copy of it, or another target) and how to measure."""

    baseline: str
    """``FILE.py:FUNC`` or ``package.module:FUNC``: a function that takes no argument and runs one step."""
    treatment: str | None = None
    """Another target (``--treatment``); None: the baseline's file with ``fix`` applied to a copy."""
    fix: str | None = None
    """A file fix of the catalog (``eager-widening``), applied to a copy of the baseline's file."""
    fix_line: int | None = None
    """The line of the baseline's file the fix is applied at; None: the lines the baseline's findings name."""
    fix_arg: str = ""
    """The jitted function's argument a finding names (``donate-state``: the state to donate)."""
    rounds: int = shared.DEFAULT_ROUNDS
    """Measured rounds per side, interleaved AB BA AB..."""
    steps: int = DEFAULT_STEPS
    """Calls of the step function per round."""
    warmup: int = DEFAULT_WARMUP
    rtol: float = 0.0
    atol: float = 0.0
    """Outputs within ``|a - b| <= atol + rtol * |b|`` count as equal; both 0: bit for bit."""
    rules: tuple[str, ...] = ()
    """Rules whose findings the treatment must not have; empty: the fix's rules (with ``fix``)."""
    min_effect: float = shared.DEFAULT_MIN_EFFECT
    alpha: float = shared.DEFAULT_ALPHA
    seed: int = 0
    require_improvement: bool = False
    budget_s: float | None = None
    """With a budget: pairs of rounds are added until the verdict decides or the seconds are spent."""
    profile_steps: int = DEFAULT_PROFILE_STEPS
    out_dir: Path | None = None

    @property
    def bitwise(self) -> bool:
        """Whether outputs must be bit-identical (no tolerance given)."""
        return self.rtol == 0.0 and self.atol == 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        d = dataclasses.asdict(self)
        d["out_dir"] = None if self.out_dir is None else str(self.out_dir)
        d["rules"] = list(self.rules)
        return d


def _spec(spec: str, option: str) -> None:
    module, sep, func = spec.rpartition(":")
    if not sep or not module or not func:
        raise InputError(f"{option} {spec!r} is not FILE.py:FUNC or package.module:FUNC",
                         "name the function that runs one step, e.g. step.py:step")


def validate_program_settings(settings: ProgramSettings) -> None:
    """Raise :class:`InputError` for settings that cannot decide anything (before anything runs)."""
    _spec(settings.baseline, "TARGET")
    if (settings.fix is None) == (settings.treatment is None):
        raise InputError("verify TARGET needs one of --fix FIX or --treatment B.py:FUNC" if settings.fix is None
                         else "--fix and --treatment both given for TARGET",
                         "pass --fix FIX (a fixed copy of TARGET's file) or --treatment B.py:FUNC")
    if settings.treatment is not None:
        _spec(settings.treatment, "--treatment")
    if settings.fix is None and (settings.fix_line is not None or settings.fix_arg):
        raise InputError("--fix-line/--fix-arg without --fix", "pass --fix FIX, or drop them")
    if settings.fix is not None and settings.fix_arg and settings.fix_line is None:
        raise InputError("--fix-arg without --fix-line: without a line, each finding names its own argument",
                         "pass --fix-line LINE with --fix-arg, or drop --fix-arg")
    if settings.fix_line is not None and settings.fix_line < 1:
        raise InputError(f"--fix-line {settings.fix_line}: lines count from 1", "pass the line a finding names")
    shared.check_rounds(settings.rounds)
    shared.check_budget(settings.budget_s)
    least = min_rounds()
    if settings.rounds < least:
        raise InputError(f"--rounds {settings.rounds}: the statistics need at least {least} rounds per side "
                         "to test a difference", f"pass --rounds {least} or more")
    if settings.steps < 1:
        raise InputError(f"--steps {settings.steps}: need at least one step per round", "pass --steps 10")
    if settings.warmup < 1:
        raise InputError(f"--warmup {settings.warmup}: need at least one untimed call (it compiles the programs)",
                         "pass --warmup 2")
    if not (settings.rtol >= 0.0 and settings.atol >= 0.0):
        raise InputError(f"--rtol {settings.rtol} --atol {settings.atol}: tolerances cannot be negative",
                         "leave them out to compare bit for bit")
    if settings.profile_steps < 1:
        raise InputError(f"--profile-steps {settings.profile_steps}: need at least one", "pass --profile-steps 3")
