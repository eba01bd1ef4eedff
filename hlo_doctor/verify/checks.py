"""The checks every kind of target shares: the step-time verdict (paired rounds), the throughput
verdict (one value per round), a check that could not run, and which check a one-line summary names."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hlo_doctor.statistics import Outcome, SampleComparison
from hlo_doctor.verify.results import Check, Stopping


def check_throughput(throughput: SampleComparison, step_time: SampleComparison,
                     require_improvement: bool, *, second: str = "step time") -> Check:
    """Check 5: the throughput outcome, and a second timing that must not regress: the pooled decode
    step times (``second`` names it: a bench run's wall time at the serving level)."""
    outcome = throughput.outcome
    ok = {Outcome.IMPROVED} if require_improvement else {Outcome.IMPROVED, Outcome.NO_CHANGE}
    passed = outcome in ok and step_time.outcome != Outcome.REGRESSED
    ci = ("" if math.isnan(throughput.ci_low) else f", CI [{throughput.ci_low:.3f}, {throughput.ci_high:.3f}]")
    figure = f"{str(outcome)}: x{throughput.ratio:.3f}{ci}; {second} {str(step_time.outcome)} x{step_time.ratio:.3f}"
    detail = f"throughput: {throughput.reason}; {second}: {step_time.reason}"
    return Check(5, "throughput verdict", passed, figure, detail)


def check_step_verdict(step_time: SampleComparison, throughput: SampleComparison | None,
                       require_improvement: bool, stopping: Stopping | None = None, *,
                       step: str = "decode step") -> Check:
    """Check 5 decided on the step times: the paired-rounds comparison of the per-round median step
    (:func:`hlo_doctor.verify.stats.compare_blocks`) must be improved (or no change, unless
    ``require_improvement``), and the per-round throughput, compared the same way, must not have
    regressed (a change that moves work out of the decode step into the prefill or the host shows
    there). ``stopping`` says how many rounds ran and why no more; ``step`` names the step measured
    (the engine's decode step, one call of a target, one sampling call)."""
    outcome = step_time.outcome
    ok = {Outcome.IMPROVED} if require_improvement else {Outcome.IMPROVED, Outcome.NO_CHANGE}
    passed = outcome in ok and (throughput is None or throughput.outcome != Outcome.REGRESSED)
    ci = ("" if math.isnan(step_time.ci_low) else f", CI [{step_time.ci_low:.3f}, {step_time.ci_high:.3f}]")
    p = "" if math.isnan(step_time.p_value) else f", p={step_time.p_value:.2g}"
    figure = f"{str(outcome)}: step x{step_time.ratio:.3f}{ci}{p}"
    if stopping is not None:
        figure += f"; {stopping.describe()}"
    if throughput is not None:
        figure += f"; throughput {str(throughput.outcome)} x{throughput.ratio:.3f}"
    detail = f"{step}: {step_time.reason}"
    if throughput is not None:
        detail += f"; throughput: {throughput.reason}"
    return Check(5, "step-time verdict", passed, figure, detail)


def not_run(number: int, name: str, why: str) -> Check:
    """A check that could not run: never a pass."""
    return Check(number, name, False, f"not run: {why}", "")


def ratio(a: float, b: float) -> float:
    """``a / b``, infinite for ``b == 0``."""
    return a / b if b else math.inf


def first_failed(checks: Sequence[Check]) -> Check | None:
    """The first failing check, in check order (what a one-line summary names)."""
    return next((c for c in checks if not c.passed), None)
