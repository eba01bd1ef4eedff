"""What ``verify --target`` measured and decided, as frozen values: one result per level, the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hlo_doctor.statistics import SampleComparison
from hlo_doctor.verify.results import Check
from hlo_doctor.verify.tpu_inference.settings import TargetSettings


@dataclass(frozen=True, slots=True)
class LevelResult:
    """One level's checks and figures (``program`` or ``serving``)."""

    level: str
    checks: tuple[Check, ...]
    throughput: SampleComparison | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    step_time: SampleComparison | None = None
    """The paired-rounds comparison of the step times that decides check 5 (program level); None
    where check 5 decides on the per-round throughput (serving level)."""

    @property
    def deciding(self) -> SampleComparison | None:
        """The comparison check 5 decides on: the step times where measured, else the throughput."""
        return self.step_time if self.step_time is not None else self.throughput

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "checks": [c.to_dict() for c in self.checks],
                "throughput": self.throughput.to_dict() if self.throughput else None,
                "step_time": self.step_time.to_dict() if self.step_time else None, "figures": self.figures}


@dataclass(frozen=True, slots=True)
class TargetReport:
    """Everything ``verify --target`` measured and decided."""

    settings: TargetSettings
    baseline: str
    treatment: str
    release: str
    levels: tuple[LevelResult, ...]
    notes: tuple[str, ...] = ()
    fix_diff: str = ""
    elapsed_s: float = 0.0

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(c for level in self.levels for c in level.checks)

    @property
    def passed(self) -> bool:
        """True only when every check of every level ran and passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def verdict(self) -> str:
        failed = [f"{lvl.level} {c.name}" for lvl in self.levels for c in lvl.checks if not c.passed]
        if failed:
            return "FAIL: " + "; ".join(failed)
        # The last level that measured decides (the serving level when it ran).
        tp = next((lvl.deciding for lvl in reversed(self.levels) if lvl.deciding is not None), None)
        return str(tp.outcome) if tp is not None else "inconclusive"

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "verdict": self.verdict, "baseline": self.baseline,
                "treatment": self.treatment, "release": self.release,
                "levels": [lvl.to_dict() for lvl in self.levels], "checks": [c.to_dict() for c in self.checks],
                "notes": list(self.notes), "settings": self.settings.to_dict(), "elapsed_s": self.elapsed_s,
                "fix_diff": self.fix_diff}
