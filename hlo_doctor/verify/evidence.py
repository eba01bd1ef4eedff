"""Check 4's evidence: a variant's own decode steps captured, diagnosed by hlo-doctor's rules, and what
each argmax in them reads."""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.core.errors import HloDoctorError
from hlo_doctor.hlo.analysis import argmax_reads, argmax_times
from hlo_doctor.verify.results import HloEvidence
from hlo_doctor.verify.settings import HLO_RULES, ProgressFn, VerifySettings
from hlo_doctor.verify.variants import Variant


def hlo_evidence(run_dir: Path) -> HloEvidence:
    """Diagnose a captured run with hlo-doctor's rules HD001-HD004 and read its argmax dtypes."""
    from hlo_doctor.lint import diagnose, load_context, load_rulebook

    ctx = load_context(run_dir)
    diagnosis = diagnose(ctx, load_rulebook(), select=HLO_RULES)
    return HloEvidence(
        run_dir=str(run_dir), findings=diagnosis.findings, rules_run=diagnosis.rules_run,
        argmax_reads=argmax_reads(ctx), step_time_us=diagnosis.step_time_us, argmax_times=argmax_times(ctx),
    )


def capture_variant(variant: Variant, settings: VerifySettings, run_dir: Path,
                    progress: ProgressFn | None) -> HloEvidence:
    """Profile a few decode steps of ``variant``'s own engine and diagnose what ran."""
    from hlo_doctor.engines.session import capture_engine

    if getattr(variant.module, "profile_target", None) is None:
        return HloEvidence(str(run_dir), (), (), (), None,
                           error=f"{variant.label} engine has no profile_target(config): nothing to capture")
    try:
        path = capture_engine(
            variant.module, variant.config, name=f"{variant.label}:{variant.source}", out_dir=run_dir,
            steps=settings.profile_steps, warmup=1,
            progress=(lambda stage, done, total: progress(f"profile {variant.label}: {stage}", done, total))
            if progress else None,
        )
        return hlo_evidence(path)
    except HloDoctorError as exc:
        return HloEvidence(str(run_dir), (), (), (), None, error=exc.one_line())
