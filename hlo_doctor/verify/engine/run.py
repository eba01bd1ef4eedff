"""``run_verify``: prepare both variants, warm them, run interleaved rounds, capture, decide the checks."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from hlo_doctor.core.errors import HloDoctorError
from hlo_doctor.core.format import json_safe
from hlo_doctor.statistics import Outcome, SampleComparison
from hlo_doctor.verify.checks import check_step_verdict
from hlo_doctor.verify.engine.capture import capture_variant
from hlo_doctor.verify.engine.checks import check_compiles, check_hlo, check_tokens, check_ttft, removed_ops
from hlo_doctor.verify.engine.results import RoundResult, VariantSummary, VerifyReport
from hlo_doctor.verify.engine.settings import VerifySettings, validate_settings
from hlo_doctor.verify.engine.variants import Variant, load_variant, make_treatment, shipped_engine_dir
from hlo_doctor.verify.evidence import hlo_evidence
from hlo_doctor.verify.results import HloEvidence, RemovedOp, Stopping
from hlo_doctor.verify.rounds import run_rounds
from hlo_doctor.verify.settings import ProgressFn
from hlo_doctor.verify.stats import alpha_at_look, compare, compare_rounds
from hlo_doctor.verify.workspace import workspace


def run_verify(settings: VerifySettings, progress: ProgressFn | None = None) -> VerifyReport:
    """Warm both variants, run interleaved measured rounds, capture the treatment, decide the checks.

    Raises :class:`InputError` for unusable settings or trees (before anything is measured).
    """
    validate_settings(settings)
    report = progress or (lambda stage, done, total: None)
    started = time.perf_counter()
    with workspace(settings.out_dir) as work:
        baseline_dir = Path(settings.baseline).resolve() if settings.baseline else shipped_engine_dir()
        fix_diff = ""
        if settings.treatment is not None:
            treatment_dir = Path(settings.treatment).resolve()
        else:
            assert settings.fix is not None
            treatment_dir, fix_diff = make_treatment(settings.fix, settings.variant, baseline_dir, work)
        report("prepare", 0, 2)
        base = load_variant("baseline", baseline_dir, settings, bundled=settings.baseline is None)
        treat = load_variant("treatment", treatment_dir, settings)
        report("prepare", 2, 2)
        return _measure(settings, base, treat, work, fix_diff, report, started)


def _warm_and_measure(settings: VerifySettings, base: Variant, treat: Variant,
                      report: ProgressFn) -> tuple[dict[str, list[RoundResult]], list[str], bool, Stopping]:
    """Warm both variants, then ``settings.rounds`` pairs of rounds: AB, BA, AB... (and, with a budget,
    more pairs until check 5 decides or the budget is spent).

    Returns the rounds per label, the notes on how they ran, whether every round started cold, and
    how many rounds ran and why no more.
    """
    rounds: dict[str, list[RoundResult]] = {"baseline": [], "treatment": []}
    variants = {"baseline": base, "treatment": treat}
    notes: list[str] = []
    for v in (base, treat):
        report(f"warm-up {v.label}", 0, 1)
        v.warmup(_only_precompile(report, f"precompile {v.label}"))
        report(f"warm-up {v.label}", 1, 1)
    if base.rewarms or treat.rewarms:
        notes.append("an engine without OfflineEngine was driven by run_offline_batch: it re-warmed each round "
                     "(outside the measured window)")
    cold = base.cold_rounds and treat.cold_rounds
    if not cold:
        notes.append("the engine cannot restart its sampler cold between rounds (no restart_sampler): a menu miss "
                     "compiles in the first round only, and check 2 compares worst rounds")
    done = [0]

    def measure(label: str, order: int) -> None:
        rounds[label].append(variants[label].measure_round(len(rounds[label]), order))
        done[0] += 1
        # With a budget the total grows by a pair at each look that does not decide.
        report("rounds", done[0], max(2 * settings.rounds, done[0] + done[0] % 2))

    def decided(look: int) -> bool:
        step = _step_comparison(settings, rounds, look)
        return step.outcome != Outcome.INCONCLUSIVE

    report("rounds", 0, 2 * settings.rounds)
    stopping = run_rounds(settings.rounds, measure, budget_s=settings.budget_s, decided=decided)
    return rounds, notes, cold, stopping


def _alpha(settings: VerifySettings, looks: int) -> float:
    """The significance level of the last look: the settings' alpha, spent over the looks with a budget."""
    return settings.alpha if settings.budget_s is None else alpha_at_look(settings.alpha, looks)


def _step_comparison(settings: VerifySettings, rounds: dict[str, list[RoundResult]], looks: int) -> SampleComparison:
    """Check 5's statistic: the paired-rounds comparison of the decode step times."""
    return compare_rounds(settings, [r.step_times_ms for r in rounds["baseline"]],
                          [r.step_times_ms for r in rounds["treatment"]], alpha=_alpha(settings, looks))


def _measure(settings: VerifySettings, base: Variant, treat: Variant, work: Path, fix_diff: str,
             report: ProgressFn, started: float) -> VerifyReport:
    import jax

    rounds, notes, cold, stopping = _warm_and_measure(settings, base, treat, report)
    b, t = (VariantSummary(v.label, v.source, v.module.__name__, v.warmup_s, tuple(rounds[v.label]))
            for v in (base, treat))

    # Check 4 (and the baseline's wasteful ops for the "removed" figure): capture after the rounds so
    # that the profiler cannot disturb a measured window.
    treat_hlo = capture_variant(treat, settings, work / "treatment-run", report)
    if settings.baseline_run is not None:
        try:
            base_hlo = hlo_evidence(Path(settings.baseline_run))
        except HloDoctorError as exc:
            base_hlo = HloEvidence(str(settings.baseline_run), (), (), (), None, error=exc.one_line())
    else:
        base_hlo = capture_variant(base, settings, work / "baseline-run", report)

    # Check 5 decides on the steps, rounds as blocks; the throughput (one value per round) is paired the
    # same way and must not regress; the batch TTFT is reported (check 2 decides on it).
    step_time = _step_comparison(settings, rounds, stopping.looks)
    throughput = compare_rounds(settings, [[r.throughput_tok_s] for r in b.rounds],
                                [[r.throughput_tok_s] for r in t.rounds], lower_is_better=False,
                                alpha=_alpha(settings, stopping.looks))
    ttft = compare(settings, [r.batch_ttft_ms for r in b.rounds], [r.batch_ttft_ms for r in t.rounds],
                   alpha=_alpha(settings, stopping.looks))
    checks = (
        check_compiles(b, t),
        check_ttft(b, t, settings.ttft_bound, cold=cold),
        check_tokens(base, treat, settings.logprobs),
        check_hlo(treat_hlo),
        check_step_verdict(step_time, throughput, settings.require_improvement, stopping),
    )
    removed = removed_ops(base_hlo, treat_hlo)
    backend = jax.default_backend()
    notes.extend(_slower_narrow_reads(removed, backend))
    return VerifyReport(
        settings=settings, config=json_safe(dataclasses.asdict(base.config)), baseline=b, treatment=t,
        checks=checks, throughput=throughput, step_time=step_time, ttft=ttft, treatment_hlo=treat_hlo,
        baseline_hlo=base_hlo, removed_ops=removed, fix_diff=fix_diff,
        elapsed_s=time.perf_counter() - started, backend=backend, notes=tuple(notes), stopping=stopping,
    )


def _slower_narrow_reads(removed: tuple[RemovedOp, ...], backend: str) -> list[str]:
    """A note for each narrowed read that got slower: on XLA:CPU that is the backend's reduce, not the fix."""
    import jaxlib

    notes = []
    for op in removed:
        before, after = op.time_per_step_us, op.treatment_time_per_step_us
        if op.status != "narrowed" or not before or after is None or after <= before * 1.1:
            continue
        where = (f"XLA:CPU of jaxlib {jaxlib.__version__} widens the narrow values inside its reduce loop; "
                 "a bf16 argmax is faster than an f32 one where reductions are bandwidth-bound (GPU, TPU) "
                 "and on jaxlib 0.11.2's XLA:CPU (docs/verify.md)") if backend == "cpu" else "measured on this backend"
        notes.append(f"{op.module}/{op.op} reads the narrow dtype now but got slower "
                     f"({before / 1e3:.2f} -> {after / 1e3:.2f} ms/step, x{after / before:.2f}): {where}")
    return notes


def _only_precompile(report: ProgressFn, label: str) -> ProgressFn:
    """The engine's precompile progress under ``label``; its other stages (an untimed batch's prefill
    and decode) are not verify's."""
    def update(stage: str, done: int, total: int) -> None:
        if stage == "precompile":
            report(label, done, total)
    return update
