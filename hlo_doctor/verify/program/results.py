"""What ``verify FILE.py:FUNC`` measured and decided, as frozen values: each side and the report."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hlo_doctor.statistics import SampleComparison
from hlo_doctor.verify.program.measure import ProgramRound
from hlo_doctor.verify.program.settings import ProgramSettings
from hlo_doctor.verify.program.sites import FixSite
from hlo_doctor.verify.results import Check, HloEvidence, RemovedOp, Stopping


@dataclass(frozen=True, slots=True)
class SideSummary:
    """One side: the target as named, its file, its warm-up and its rounds."""

    label: str
    spec: str
    source: str
    warmup_s: float
    rounds: tuple[ProgramRound, ...]

    @property
    def step_times_ms(self) -> list[float]:
        """Every measured call's time, round after round."""
        return [t for r in self.rounds for t in r.step_times_ms]

    @property
    def compiles(self) -> int:
        """Backend compiles inside the measured rounds."""
        return sum(len(r.compiles) for r in self.rounds)

    @property
    def median_step_ms(self) -> float | None:
        """Median time of one call over every round."""
        times = self.step_times_ms
        return float(np.median(times)) if times else None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"label": self.label, "spec": self.spec, "source": self.source, "warmup_s": self.warmup_s,
                "median_step_ms": self.median_step_ms, "compiles": self.compiles,
                "rounds": [r.to_dict() for r in self.rounds]}


@dataclass(frozen=True, slots=True)
class ProgramReport:
    """Everything ``verify FILE.py:FUNC`` measured and decided."""

    settings: ProgramSettings
    baseline: SideSummary
    treatment: SideSummary
    checks: tuple[Check, ...]
    step_time: SampleComparison | None
    """Every call's time, treatment over baseline (lower is better)."""
    round_time: SampleComparison | None
    """Each round's wall time, treatment over baseline."""
    baseline_hlo: HloEvidence | None
    treatment_hlo: HloEvidence | None
    removed_ops: tuple[RemovedOp, ...]
    outputs: str
    """How the outputs were compared (``bit for bit`` or the tolerance) and how many calls."""
    fix_diff: str = ""
    fix_safe: bool | None = None
    """With ``--fix``: whether every edit is safe (output-identical by construction)."""
    fix_sites: tuple[FixSite, ...] = ()
    """With ``--fix`` and no ``--fix-line``: the lines fixed, each with the baseline's finding that named it."""
    elapsed_s: float = 0.0
    backend: str = ""
    load_average: tuple[float, float] = (0.0, 0.0)
    """The machine's 1-minute load average when the run started and when it ended."""
    notes: tuple[str, ...] = ()
    stopping: Stopping | None = None
    """How many rounds ran and why no more (the settings' count, or a budget's look that decided)."""

    @property
    def passed(self) -> bool:
        """True only when every check passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def verdict(self) -> str:
        """The step-time outcome (``improved``, ``no change``...), or ``FAIL: `` and the checks that failed."""
        failed = [c for c in self.checks if not c.passed and c.number != 4]
        if failed:
            return "FAIL: " + "; ".join(c.name for c in failed)
        return str(self.step_time.outcome) if self.step_time is not None else "inconclusive"

    @property
    def removed_time_per_step_us(self) -> float | None:
        """Op time per step (baseline's capture) of the ops the treatment no longer runs, summed over
        the threads that ran them: on XLA:CPU (ops of several threads at once) it can exceed the wall
        step, and the table says so."""
        times = [o.time_per_step_us for o in self.removed_ops if o.time_per_step_us is not None]
        return float(sum(times)) if self.removed_ops else None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "passed": self.passed, "verdict": self.verdict, "checks": [c.to_dict() for c in self.checks],
            "step_time": self.step_time.to_dict() if self.step_time else None,
            "round_time": self.round_time.to_dict() if self.round_time else None,
            "outputs": self.outputs,
            "removed_ops": [o.to_dict() for o in self.removed_ops],
            "removed_time_per_step_us": self.removed_time_per_step_us,
            "baseline": self.baseline.to_dict(), "treatment": self.treatment.to_dict(),
            "baseline_hlo": self.baseline_hlo.to_dict() if self.baseline_hlo else None,
            "treatment_hlo": self.treatment_hlo.to_dict() if self.treatment_hlo else None,
            "settings": self.settings.to_dict(), "fix_diff": self.fix_diff, "fix_safe": self.fix_safe,
            "fix_sites": [site.to_dict() for site in self.fix_sites],
            "backend": self.backend, "elapsed_s": self.elapsed_s, "load_average": list(self.load_average),
            "notes": list(self.notes), "stopping": self.stopping.to_dict() if self.stopping else None,
        }
