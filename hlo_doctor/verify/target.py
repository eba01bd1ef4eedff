"""``verify --target T``: a tpu-inference tree against its patched copy (or ``--treatment T2``).

Program level (always, for tpu-inference trees): :mod:`hlo_doctor.verify.program`. Serving level
(with ``--bench CMD``): :mod:`hlo_doctor.verify.bench`. Both levels report the same checks; a check
that could not run says why and never passes. The target itself is never written: the treatment is a
patched copy in the work folder.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hlo_doctor.core.errors import HloDoctorError, InputError
from hlo_doctor.statistics import SampleComparison, compare_samples
from hlo_doctor.verify.results import Check
from hlo_doctor.verify.settings import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_EFFECT,
    DEFAULT_ROUNDS,
    DEFAULT_TTFT_BOUND,
    ProgressFn,
)


@dataclass(frozen=True, slots=True)
class TargetSettings:
    """What ``verify --target`` compares and how hard it measures."""

    target: Path
    treatment: Path | None = None
    fix: str = "bf16-greedy-sampler"
    variant: str = "full"
    rounds: int = DEFAULT_ROUNDS
    steps: int = 8
    """Sampling steps per program-level round."""
    batch: int = 16
    vocab: int = 2048
    logprobs: bool = False
    ttft_bound: float = DEFAULT_TTFT_BOUND
    min_effect: float = DEFAULT_MIN_EFFECT
    alpha: float = DEFAULT_ALPHA
    seed: int = 0
    out_dir: Path | None = None
    bench: str | None = None
    """A command with ``{tree}`` and ``{out}``: the serving level."""
    bench_rounds: int | None = None
    bench_timeout: float = 1800.0
    bench_metrics: tuple[tuple[str, str], ...] = ()
    without_compiler_options: bool = False
    """Jit ``sample()``'s body without the release's TPU compiler options when this backend rejects them."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k in ("target", "treatment", "out_dir"):
            d[k] = None if d[k] is None else str(d[k])
        d["bench_metrics"] = dict(self.bench_metrics)
        return d


@dataclass(frozen=True, slots=True)
class LevelResult:
    """One level's checks and figures (``program`` or ``serving``)."""

    level: str
    checks: tuple[Check, ...]
    throughput: SampleComparison | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "checks": [c.to_dict() for c in self.checks],
                "throughput": self.throughput.to_dict() if self.throughput else None, "figures": self.figures}


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
        tp = next((lvl.throughput for lvl in reversed(self.levels) if lvl.throughput is not None), None)
        return str(tp.outcome) if tp is not None else "inconclusive"

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "verdict": self.verdict, "baseline": self.baseline,
                "treatment": self.treatment, "release": self.release,
                "levels": [lvl.to_dict() for lvl in self.levels], "checks": [c.to_dict() for c in self.checks],
                "notes": list(self.notes), "settings": self.settings.to_dict(), "elapsed_s": self.elapsed_s,
                "fix_diff": self.fix_diff}


def _tree(path: Path, option: str, *, engine_ok: bool) -> Any:
    from hlo_doctor.fixes.targets import ENGINE, TPU_INFERENCE, detect_target

    target = detect_target(Path(path))
    if target.project == TPU_INFERENCE or (engine_ok and target.project == ENGINE):
        return target
    if target.project == ENGINE:
        raise InputError(f"{option} {path} is {target.kind}, not a tpu-inference tree",
                         "verify an engine tree with --baseline/--treatment/--fix, or add --bench CMD")
    raise InputError(f"{option} {path} is {target.kind}, not a tpu-inference tree",
                     "pass an installed tpu_inference package, an unpacked wheel or a checkout")


def _treatment_tree(settings: TargetSettings, target: Any, work: Path) -> tuple[Any, str]:
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


def validate_target_settings(settings: TargetSettings) -> None:
    """Raise :class:`InputError` for settings that cannot be measured."""
    if settings.rounds < 1:
        raise InputError(f"--rounds {settings.rounds}: need at least one round", "pass --rounds 5 or more")
    if settings.batch < 1 or settings.vocab < 2:
        raise InputError(f"--batch {settings.batch} --vocab {settings.vocab}: too small", "pass --batch 16 --vocab 2048")
    if not settings.ttft_bound >= 1.0:
        raise InputError(f"--ttft-bound {settings.ttft_bound}: must be >= 1", "pass --ttft-bound 1.25")
    if settings.bench is not None and ("{tree}" not in settings.bench or "{out}" not in settings.bench):
        raise InputError(f"--bench {settings.bench!r} lacks the {{tree}} or {{out}} placeholder",
                         "write the command with {tree} (the tree to run) and {out} (the JSON it writes)")


def run_target(settings: TargetSettings, work: Path, progress: ProgressFn | None = None) -> TargetReport:
    """Compare ``settings.target`` with its treatment at program level (and serving level with --bench)."""
    from hlo_doctor.fixes.targets import TPU_INFERENCE
    from hlo_doctor.verify.program_run import program_level

    validate_target_settings(settings)
    report = progress or (lambda stage, done, total: None)
    started = time.perf_counter()
    target = _tree(settings.target, "--target", engine_ok=settings.bench is not None)
    treatment, diff = _treatment_tree(settings, target, work)
    serving = None
    if settings.bench is not None:
        from hlo_doctor.verify.bench import serving_level

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
    from hlo_doctor.verify.checks import check_hlo
    from hlo_doctor.verify.evidence import capture_variant
    from hlo_doctor.verify.settings import VerifySettings
    from hlo_doctor.verify.variants import load_variant

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


def compare(settings: Any, baseline: list[float], treatment: list[float], *,
            lower_is_better: bool = True) -> SampleComparison:
    """``compare_samples`` with the settings' effect size, alpha and seed."""
    return compare_samples(np.asarray(baseline), np.asarray(treatment), min_effect=settings.min_effect,
                           alpha=settings.alpha, lower_is_better=lower_is_better, seed=settings.seed)
