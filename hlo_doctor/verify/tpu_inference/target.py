"""``verify --target T``: a tpu-inference tree against its patched copy (or ``--treatment T2``).

Program level (always, for tpu-inference trees): :mod:`~hlo_doctor.verify.tpu_inference.program_run`.
Serving level (with ``--bench CMD``): :mod:`~hlo_doctor.verify.tpu_inference.bench`. Both levels report
the same checks; a check that could not run says why and never passes. The target itself is never
written: the treatment is a patched copy in the work folder.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hlo_doctor.core.errors import HloDoctorError, InputError
from hlo_doctor.verify.engine.capture import capture_variant
from hlo_doctor.verify.engine.checks import check_hlo
from hlo_doctor.verify.engine.settings import VerifySettings
from hlo_doctor.verify.engine.variants import load_variant
from hlo_doctor.verify.results import Check
from hlo_doctor.verify.settings import ProgressFn
from hlo_doctor.verify.tpu_inference.bench import serving_level
from hlo_doctor.verify.tpu_inference.program_run import program_level
from hlo_doctor.verify.tpu_inference.results import LevelResult, TargetReport
from hlo_doctor.verify.tpu_inference.settings import TargetSettings, validate_target_settings

if TYPE_CHECKING:
    from hlo_doctor.fixes.targets import Target


def _tree(path: Path, option: str, *, engine_ok: bool) -> Target:
    # Imported here: fixes loads libcst, which a light command never needs.
    from hlo_doctor.fixes.targets import ENGINE, TPU_INFERENCE, detect_target

    target = detect_target(Path(path))
    if target.project == TPU_INFERENCE or (engine_ok and target.project == ENGINE):
        return target
    if target.project == ENGINE:
        raise InputError(f"{option} {path} is {target.kind}, not a tpu-inference tree",
                         "verify an engine tree with --baseline/--treatment/--fix, or add --bench CMD")
    raise InputError(f"{option} {path} is {target.kind}, not a tpu-inference tree",
                     "pass an installed tpu_inference package, an unpacked wheel or a checkout")


def _treatment_tree(settings: TargetSettings, target: Target, work: Path) -> tuple[Target, str]:
    from hlo_doctor.fixes import FixApplied, FixSkipped, apply_fix, get_fix, patched_copy
    from hlo_doctor.fixes.targets import detect_target

    if settings.treatment is not None:
        treatment = _tree(settings.treatment, "--treatment", engine_ok=settings.bench is not None)
        if treatment.project != target.project:
            raise InputError(f"--treatment {settings.treatment} is {treatment.kind} but --target is {target.kind}",
                             "compare two trees of the same project")
        return treatment, ""
    get_fix(settings.fix)
    dry = apply_fix(settings.fix, target.root, variant=settings.variant, dry_run=True)
    if not isinstance(dry, FixApplied):
        reason = getattr(dry, "reason", "") or type(dry).__name__
        if isinstance(dry, FixSkipped) and getattr(dry, "kind", "") == "already-applied":
            raise InputError(f"--target {settings.target} already carries {settings.fix}: nothing to compare",
                             "pass the original tree as --target, or the patched one as --treatment")
        raise InputError(f"{settings.fix} does not know --target {settings.target} ({target.release}): {reason}",
                         "pass a release the fix supports (0.23.0 or later), or --treatment PATH")
    dest = work / f"treatment-{settings.fix}-{settings.variant}"
    if dest.exists():
        shutil.rmtree(dest)
    if target.root == target.package_dir and target.package_dir.name == "tpu_inference":
        # A package directory (site-packages/tpu_inference): the copy keeps the package's name.
        dest = dest / "tpu_inference"
    try:
        patched_copy(settings.fix, target.root, dest, variant=settings.variant)
    except HloDoctorError as exc:
        raise InputError(f"{settings.fix} cannot patch a copy of --target {settings.target}: {exc.one_line()}",
                         "pass --treatment PATH") from exc
    return detect_target(dest), dry.diff


def run_target(settings: TargetSettings, work: Path, progress: ProgressFn | None = None) -> TargetReport:
    """Compare ``settings.target`` with its treatment at program level (and serving level with --bench)."""
    from hlo_doctor.fixes.targets import TPU_INFERENCE

    validate_target_settings(settings)
    report = progress or (lambda stage, done, total: None)
    started = time.perf_counter()
    target = _tree(settings.target, "--target", engine_ok=settings.bench is not None)
    treatment, diff = _treatment_tree(settings, target, work)
    serving = None
    if settings.bench is not None:
        # First: a bench command that cannot run is bad input, reported before anything else is measured.
        serving = serving_level(settings, target, treatment, work, report)
    if target.project == TPU_INFERENCE:
        levels = [program_level(settings, target, treatment, report)]
        notes = list(levels[0].figures.get("notes", ()))
    else:
        # The reference engine standing in for a serving stack: its HLO check comes from its own capture.
        levels, notes = [engine_hlo_level(settings, treatment.package_dir, work, report)], []
    if serving is not None:
        levels.append(serving)
    return TargetReport(settings, str(target.root), str(treatment.root), target.release, tuple(levels),
                        tuple(notes), diff, time.perf_counter() - started)


def engine_hlo_level(settings: TargetSettings, engine_dir: Path, work: Path, report: ProgressFn) -> LevelResult:
    """Check 4 on an engine tree's own capture (the treatment), and HD006 on its source."""
    vs = VerifySettings(treatment=engine_dir, batch=settings.batch, vocab=settings.vocab, logprobs=settings.logprobs)
    variant = load_variant("treatment", engine_dir, vs)
    evidence = capture_variant(variant, vs, work / "treatment-run", report)
    return LevelResult("program", (check_hlo(evidence), source_hd006(engine_dir)), None,
                       {"treatment_hlo": evidence.to_dict()})


def source_hd006(package_dir: Path) -> Check:
    """HD006 on a tree's source: the precompile menu's dummy dtype is the dtype the runner passes."""
    from hlo_doctor.lint import Context, diagnose, load_rulebook

    ctx = Context(source_root=Path(package_dir), kind="source", origin=str(package_dir))
    findings = diagnose(ctx, load_rulebook(), select=("HD006",)).findings
    if findings:
        return Check(6, "precompile key (HD006)", False, f"{len(findings)} finding(s)",
                     "; ".join(f"{f.code} {f.source or f.op}" for f in findings))
    return Check(6, "precompile key (HD006)", True, "menu dtype = runner dtype", "")
