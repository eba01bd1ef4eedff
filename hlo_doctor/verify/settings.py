"""What every kind of verify target measures alike: the defaults, the rules of the HLO check, and
the checks of the settings that any measurement needs."""

from __future__ import annotations

from typing import Protocol

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import ProgressFn  # noqa: F401  (re-exported: progress(stage, done, total))

HLO_RULES = ("HD001", "HD002", "HD003", "HD004")
"""The rules check 4 runs on the treatment's own trace: any finding of theirs fails it."""

DEFAULT_ROUNDS = 6
DEFAULT_TTFT_BOUND = 1.25
DEFAULT_MIN_EFFECT = 0.02
DEFAULT_ALPHA = 0.05


class MeasureSettings(Protocol):
    """What the statistics call a change, as every kind of target's settings say it.

    :class:`~hlo_doctor.verify.engine.settings.VerifySettings` and
    :class:`~hlo_doctor.verify.tpu_inference.settings.TargetSettings` both are one.
    """

    @property
    def min_effect(self) -> float: ...

    @property
    def alpha(self) -> float: ...

    @property
    def seed(self) -> int: ...


def check_rounds(rounds: int) -> None:
    """Raise :class:`InputError` for a round count that measures nothing."""
    if rounds < 1:
        raise InputError(f"--rounds {rounds}: need at least one round", "pass --rounds 5 or more")


def check_budget(budget_s: float | None) -> None:
    """Raise :class:`InputError` for a time budget that cannot hold a round."""
    if budget_s is not None and not budget_s > 0:
        raise InputError(f"--budget {budget_s}: must be a positive number of seconds", "pass --budget 300")


def check_ttft_bound(bound: float) -> None:
    """Raise :class:`InputError` for a TTFT bound that would fail a treatment as fast as its baseline."""
    if not bound >= 1.0:
        raise InputError(f"--ttft-bound {bound}: must be >= 1", "pass --ttft-bound 1.25")
