"""What the engine A/B measured and decided, as frozen values: rounds, variants, the report."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hlo_doctor.statistics import SampleComparison
from hlo_doctor.verify.engine.settings import VerifySettings
from hlo_doctor.verify.results import Check, HloEvidence, RemovedOp, Stopping


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One measured offline batch of one variant."""

    variant: str
    """``baseline`` or ``treatment``."""
    index: int
    """The variant's own round number, from 0."""
    order: int
    """Position in the whole interleaved sequence, from 0."""
    throughput_tok_s: float
    batch_ttft_ms: float
    tpot_ms: float
    step_times_ms: tuple[float, ...]
    compiles: int
    """Backend compiles counted by ``jax.monitoring`` inside the round."""
    compile_reasons: tuple[str, ...]
    """The engine's report of those compiles (program and JAX's cache-miss explanation)."""
    tokens_sha256: str

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["step_times_ms"] = list(self.step_times_ms)
        d["compile_reasons"] = list(self.compile_reasons)
        return d


@dataclass(frozen=True, slots=True)
class VariantSummary:
    """One variant: where its source came from, its warm-up and its rounds."""

    label: str
    source: str
    module: str
    """The module name the tree was loaded under."""
    warmup_s: float
    rounds: tuple[RoundResult, ...]

    def median(self, metric: str) -> float:
        values = [getattr(r, metric) for r in self.rounds]
        return float(np.median(values)) if values else math.nan

    @property
    def step_times_ms(self) -> list[float]:
        return [t for r in self.rounds for t in r.step_times_ms]

    @property
    def compiles(self) -> int:
        return sum(r.compiles for r in self.rounds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label, "source": self.source, "module": self.module, "warmup_s": self.warmup_s,
            "median_throughput_tok_s": self.median("throughput_tok_s"),
            "median_batch_ttft_ms": self.median("batch_ttft_ms"),
            "median_tpot_ms": self.median("tpot_ms"),
            "median_step_ms": float(np.median(self.step_times_ms)) if self.step_times_ms else None,
            "compiles": self.compiles,
            "rounds": [r.to_dict() for r in self.rounds],
        }


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Everything verify measured and decided."""

    settings: VerifySettings
    config: dict[str, Any]
    """The engine configuration both variants ran (as the baseline's EngineConfig has it)."""
    baseline: VariantSummary
    treatment: VariantSummary
    checks: tuple[Check, ...]
    throughput: SampleComparison | None
    """Per-round throughput, paired rounds (must not regress)."""
    step_time: SampleComparison | None
    """Decode step times, paired rounds: what check 5 decides on."""
    ttft: SampleComparison | None
    treatment_hlo: HloEvidence | None
    baseline_hlo: HloEvidence | None
    removed_ops: tuple[RemovedOp, ...]
    fix_diff: str = ""
    """The unified diff apply-fix made for the treatment (when verify made the treatment)."""
    elapsed_s: float = 0.0
    backend: str = ""
    notes: tuple[str, ...] = field(default=())
    stopping: Stopping | None = None
    """How many rounds ran and why no more (the settings' count, decided, or the budget spent)."""

    @property
    def passed(self) -> bool:
        """True only when every check passed."""
        return all(c.passed for c in self.checks)

    @property
    def verdict(self) -> str:
        """``improved`` / ``no change`` / ``regressed`` / ``inconclusive`` (the decode step, paired
        rounds), or ``FAIL: ...`` naming failed checks 1-4."""
        failed = [c for c in self.checks if not c.passed and c.number != 5]
        if failed:
            return "FAIL: " + "; ".join(c.name for c in failed)
        return str(self.step_time.outcome) if self.step_time is not None else "inconclusive"

    @property
    def profiled_step_us(self) -> tuple[float | None, float | None]:
        """(baseline, treatment) step time of verify's own captures (what diagnose's % of step divides
        by), beside the decode step the rounds measured without a profiler."""
        return (self.baseline_hlo.step_time_us if self.baseline_hlo else None,
                self.treatment_hlo.step_time_us if self.treatment_hlo else None)

    def profiled_step(self) -> dict[str, Any]:
        """The profiled step of both captures next to the measured decode step, in milliseconds."""
        base, treat = self.profiled_step_us
        b_ms = None if base is None else base / 1e3
        t_ms = None if treat is None else treat / 1e3
        step = self.step_time
        return {
            "profiled_step_ms": {"baseline": b_ms, "treatment": t_ms,
                                 "ratio": t_ms / b_ms if b_ms and t_ms is not None else None,
                                 "source": "baseline: " + ("--baseline-run" if self.settings.baseline_run else
                                                           "verify's capture") + "; treatment: verify's capture",
                                 "profiled_steps": self.settings.profile_steps},
            "decode_step_ms": {"baseline": step.baseline_median if step else None,
                               "treatment": step.candidate_median if step else None,
                               "medians_ratio": step.candidate_median / step.baseline_median
                               if step and step.baseline_median else None,
                               # The verdict's statistic is not the medians' ratio: say which it is.
                               "ratio": step.ratio if step else None,
                               "ratio_of": "the paired rounds' trimmed means (the verdict's statistic)",
                               "ci": [step.ci_low, step.ci_high] if step else None,
                               "outcome": str(step.outcome) if step else None,
                               "significant": bool(step and step.significant),
                               "source": "median of every decode step of the measured rounds, no profiler"},
        }

    @property
    def removed_time_per_step_us(self) -> float | None:
        """Op time per step (baseline trace) of the wasteful ops the treatment no longer runs: the ops'
        times summed, over every thread that ran them, so on XLA:CPU (ops of several threads at once)
        it can exceed the wall step (:attr:`removed_exceeds_step`)."""
        times = [o.time_per_step_us for o in self.removed_ops if o.removed and o.time_per_step_us is not None]
        return float(sum(times)) if times else None

    @property
    def removed_exceeds_step(self) -> bool:
        """The removed ops' summed op time is more than the baseline's profiled (wall) step."""
        removed, (base, _) = self.removed_time_per_step_us, self.profiled_step_us
        return removed is not None and base is not None and removed > base

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "verdict": self.verdict,
            "checks": [c.to_dict() for c in self.checks],
            "throughput": self.throughput.to_dict() if self.throughput else None,
            "step_time": self.step_time.to_dict() if self.step_time else None,
            "step": self.profiled_step(),
            "stopping": self.stopping.to_dict() if self.stopping else None,
            "batch_ttft": self.ttft.to_dict() if self.ttft else None,
            "removed_ops": [o.to_dict() for o in self.removed_ops],
            "removed_time_per_step_us": self.removed_time_per_step_us,
            "removed_time_is": "op time summed over the threads that ran the ops" + (
                ", more than the wall step" if self.removed_exceeds_step else ""),
            "baseline": self.baseline.to_dict(),
            "treatment": self.treatment.to_dict(),
            "treatment_hlo": self.treatment_hlo.to_dict() if self.treatment_hlo else None,
            "baseline_hlo": self.baseline_hlo.to_dict() if self.baseline_hlo else None,
            "settings": self.settings.to_dict(),
            "engine_config": self.config,
            "backend": self.backend,
            "elapsed_s": self.elapsed_s,
            "notes": list(self.notes),
            "cold_rounds": not any("cannot restart" in n for n in self.notes),
            "fix_diff": self.fix_diff,
        }
