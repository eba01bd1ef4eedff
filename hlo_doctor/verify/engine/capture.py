"""Check 4's capture: a variant's own decode steps profiled and diagnosed by hlo-doctor's rules."""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.core.errors import HloDoctorError
from hlo_doctor.engines.session import capture_engine
from hlo_doctor.verify.engine.settings import VerifySettings
from hlo_doctor.verify.engine.variants import Variant
from hlo_doctor.verify.evidence import hlo_evidence
from hlo_doctor.verify.results import HloEvidence
from hlo_doctor.verify.settings import ProgressFn


def capture_variant(variant: Variant, settings: VerifySettings, run_dir: Path,
                    progress: ProgressFn | None) -> HloEvidence:
    """Profile a few decode steps of ``variant``'s own engine and diagnose what ran."""
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
