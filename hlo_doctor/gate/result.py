"""What the gate decided: the verdict, one :class:`OpDiff` per canonical key, the violations."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from hlo_doctor.core.errors import ExitCode
from hlo_doctor.gate.match import RunSummary
from hlo_doctor.gate.policy import GatePolicy
from hlo_doctor.statistics import SampleComparison

__all__ = ["JSON_SCHEMA", "GateResult", "OpDiff", "Verdict", "Violation"]

JSON_SCHEMA = "hlo-doctor.gate/1"


class Verdict(StrEnum):
    """The gate's answer."""

    PASS = "pass"
    REGRESSION = "regression"
    INCONCLUSIVE = "inconclusive"
    """Only under ``strict``: some change was within noise."""

    @property
    def exit_code(self) -> ExitCode:
        """0 for pass; 1 for a regression or (strict) inconclusive."""
        return ExitCode.OK if self is Verdict.PASS else ExitCode.FINDINGS


def undecided_reason(judgement: str, c: SampleComparison | None) -> str:
    """Why a change is undecided (``within noise``, ``inconclusive``), for every view: the statistic
    the judgement tested and what kept it from deciding (too few samples, the captures' noise floor,
    not significant, below the minimum effect); "" for a decided or untested judgement."""
    if c is None or "within noise" not in judgement and judgement != "inconclusive":
        return ""
    stat = ("medians" if c.method == "samples" else c.method) + (
        f" {c.change_pct:+.1f}%" if math.isfinite(c.ratio) else "")
    if "within the noise between the two captures" in c.reason:
        needed = c.reason.rsplit("(", 1)[-1].rstrip(")")
        cause = f"under the noise floor between the captures ({needed})"
    elif not c.tested:
        # "too few samples to test (5 baseline, 3 candidate; need 5 each)": the clause, whole.
        cause = c.reason.split(")")[0] + ")" if c.reason.startswith("too few") and ")" in c.reason \
            else (c.reason or "not tested")
    elif c.p_value >= c.alpha:
        cause = f"not significant (p={c.p_value:.2g}, alpha {c.alpha:.2g})"
    else:
        cause = f"below the minimum effect of {c.min_effect:.0%}"
    return f"{stat}; {cause}"


@dataclass(frozen=True, slots=True)
class OpDiff:
    """One canonical key: its status in the two runs and how it was judged."""

    key: str
    module: str
    opcode: str
    category: str
    shape: str
    ops: str
    """Instruction names (candidate's when present), comma-separated."""
    status: str
    """``matched``, ``new`` (candidate only) or ``vanished`` (baseline only)."""
    baseline_us: float | None
    """Time per step in the baseline (None when new)."""
    candidate_us: float | None
    """Time per step in the candidate (None when vanished)."""
    bytes_written: int
    source: str
    judgement: str
    """``regressed``, ``improved``, ``no change``, ``within noise`` (slower, undecided; ``inconclusive``
    under strict), ``not slower, within noise``, ``below floor``, ``ignored``, ``new``,
    ``new: fails the gate``, ``vanished``."""
    comparison: SampleComparison | None = None

    @property
    def delta_us(self) -> float:
        """Candidate minus baseline time per step (a missing side counts as 0)."""
        return (self.candidate_us or 0.0) - (self.baseline_us or 0.0)

    @property
    def why(self) -> str:
        """Why a change is undecided, for every view (:func:`undecided_reason`); "" when decided."""
        return undecided_reason(self.judgement, self.comparison)

    @property
    def shown_judgement(self) -> str:
        """The judgement as views print it: with :attr:`why` when it is undecided."""
        return f"{self.judgement} ({self.why})" if self.why else self.judgement

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "comparison"}
        d["delta_us"] = self.delta_us
        d["why"] = self.why
        d["comparison"] = self.comparison.to_dict() if self.comparison else None
        return d


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason the gate fails."""

    rule: str
    """``step-time``, ``op-time`` or ``new-op``."""
    key: str
    """The canonical key (``step`` for step time)."""
    message: str
    time_per_step_us: float | None = None
    """The candidate's time per step of what regressed (the op, or the step)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GateResult:
    """Everything the gate decided, ready to render."""

    verdict: Verdict
    strict: bool
    policy: GatePolicy
    baseline: RunSummary
    candidate: RunSummary
    step: SampleComparison | None
    """Step-time comparison (None when neither run had a step time)."""
    step_judgement: str
    ops: tuple[OpDiff, ...]
    """Every key of either run: violations first, then by the size of the change."""
    violations: tuple[Violation, ...]
    within_noise: tuple[str, ...]
    """What could not be decided: ``step`` and/or canonical keys."""
    matched_fraction: float
    """Share of the baseline's op time whose keys the candidate also has."""
    speed_factor: float = 1.0
    """Candidate over baseline machine speed (time-weighted median op ratio); 1.0 when not normalized."""
    speed_ops: int = 0
    """Ops the speed factor was estimated from; 0 when not normalized."""
    capture_noise: float = 0.0
    """Robust spread (log scale) of the time ratios of the ops in common; 0 when not estimated."""
    notes: tuple[str, ...] = field(default=())
    memory: tuple[Any, ...] = field(default=())
    """Each program's peak on both sides (:class:`hlo_doctor.gate.memory.PeakDiff`), when both
    captures hold buffer assignments."""

    @property
    def exit_code(self) -> ExitCode:
        """The process exit code for this verdict."""
        return self.verdict.exit_code

    def count(self, status: str) -> int:
        """Number of keys with this status (``matched``, ``new``, ``vanished``)."""
        return sum(1 for o in self.ops if o.status == status)

    def to_dict(self) -> dict[str, Any]:
        """The JSON verdict (schema ``hlo-doctor.gate/1``)."""
        return {
            "schema": JSON_SCHEMA,
            "verdict": str(self.verdict),
            "exit_code": int(self.exit_code),
            "strict": self.strict,
            "baseline": self.baseline.to_dict(),
            "candidate": self.candidate.to_dict(),
            "policy": self.policy.to_dict(),
            "step": {
                "judgement": self.step_judgement,
                "why": undecided_reason(self.step_judgement, self.step),
                "comparison": self.step.to_dict() if self.step else None,
            },
            "summary": {
                "matched": self.count("matched"),
                "new": self.count("new"),
                "vanished": self.count("vanished"),
                "violations": len(self.violations),
                "within_noise": len(self.within_noise),
                "matched_fraction": self.matched_fraction,
            },
            "speed": {"factor": self.speed_factor, "ops": self.speed_ops},
            "capture_noise": self.capture_noise,
            "violations": [v.to_dict() for v in self.violations],
            "within_noise": list(self.within_noise),
            "notes": list(self.notes),
            "memory": [d.to_dict() for d in self.memory],
            "ops": [o.to_dict() for o in self.ops],
        }
