"""The whole loop in one call: profile -> diagnose -> apply-fix (on a copy) -> verify -> report.

Every artifact lands in one folder::

    OUT/
      profile/            run directory of the baseline engine (xprof opens it; op stats inside)
      diagnose.json       findings of the baseline's trace (hlo-doctor's rules)
      diagnose.md
      fix.diff            what the bundled fix changed in the engine's source
      treatment-engine/   the patched copy of the engine (the original is never touched)
      verify/             the treatment's own capture for the HLO check
      verify.json         the A/B measurement, the five checks and the verdict
      verify.md
      report.md           what was found, what the fix changed, what it measured, the verdict
      doctor.json         the same as data

An existing OUT is reused only when it holds an earlier doctor run (``doctor.json``) or is empty.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import ExitCode, InputError
from hlo_doctor.core.format import fmt_ms
from hlo_doctor.core.model import ProgressFn
from hlo_doctor.verify import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROFILE_STEPS,
    DEFAULT_ROUNDS,
    DEFAULT_TTFT_BOUND,
    VerifyReport,
    VerifySettings,
    engine_config,
    metric_rows,
    render_json,
    render_markdown,
    run_verify,
)

__all__ = ["DoctorResult", "DoctorSettings", "render_report", "run_doctor"]


_ARTIFACTS = ("profile", "diagnose.json", "diagnose.md", "fix.diff", "treatment-engine", "verify", "verify.json",
              "verify.md", "report.md", "doctor.json")


@dataclass(frozen=True, slots=True)
class DoctorSettings:
    """What ``hlo-doctor doctor`` runs on and how long it measures."""

    engine: Path | None = None
    """Engine source tree; None = the bundled reference engine."""
    out_dir: Path = Path("runs/doctor")
    variant: str = "full"
    rounds: int = DEFAULT_ROUNDS
    max_tokens: int = DEFAULT_MAX_TOKENS
    batch: int | None = None
    vocab: int | None = None
    profile_steps: int = 5
    verify_profile_steps: int = DEFAULT_PROFILE_STEPS
    ttft_bound: float = DEFAULT_TTFT_BOUND


@dataclass(frozen=True, slots=True)
class DoctorResult:
    """What the loop found, changed, measured and concluded."""

    settings: DoctorSettings
    engine_dir: str
    profile_run: Path
    diagnosis: Any
    """:class:`hlo_doctor.diagnose.Diagnosis` of the baseline's trace."""
    fix_id: str | None
    fix_diff: str
    treatment_dir: Path | None
    verify: VerifyReport | None
    stage_seconds: tuple[tuple[str, float], ...] = field(default=())

    @property
    def elapsed_s(self) -> float:
        return sum(s for _, s in self.stage_seconds)

    @property
    def verdict(self) -> str:
        """One phrase: the verify verdict, or why there was nothing to verify."""
        if self.fix_id is None:
            return "nothing to fix" if not self.diagnosis.findings else "findings without a bundled fix"
        assert self.verify is not None
        return ("PASS: " if self.verify.passed else "") + self.verify.verdict

    @property
    def exit_code(self) -> ExitCode:
        """0 when verify passed (or nothing was found), 1 otherwise."""
        if self.fix_id is None:
            return ExitCode.OK if not self.diagnosis.findings else ExitCode.FINDINGS
        assert self.verify is not None
        return ExitCode.OK if self.verify.passed else ExitCode.FINDINGS

    def to_dict(self) -> dict[str, Any]:
        s = dataclasses.asdict(self.settings)
        s["engine"] = None if self.settings.engine is None else str(self.settings.engine)
        s["out_dir"] = str(self.settings.out_dir)
        return {
            "verdict": self.verdict, "exit_code": int(self.exit_code), "engine": self.engine_dir,
            "profile_run": str(self.profile_run), "fix": self.fix_id,
            "treatment_engine": None if self.treatment_dir is None else str(self.treatment_dir),
            "findings": [f.to_dict() for f in self.diagnosis.findings],
            "diagnosis_summary": self.diagnosis.summary_line(),
            "verify": None if self.verify is None else {
                "passed": self.verify.passed, "verdict": self.verify.verdict,
                "checks": [c.to_dict() for c in self.verify.checks],
                "removed_time_per_step_us": self.verify.removed_time_per_step_us,
            },
            "stage_seconds": dict(self.stage_seconds), "elapsed_s": self.elapsed_s, "settings": s,
        }


def _prepare_out(out_dir: Path) -> Path:
    out_dir = Path(out_dir).absolute()
    if out_dir.exists():
        if not out_dir.is_dir():
            raise InputError(f"--out {out_dir} exists and is a file", "choose another --out folder")
        if any(out_dir.iterdir()) and not (out_dir / "doctor.json").is_file():
            raise InputError(f"--out {out_dir} exists and does not hold an earlier doctor run",
                             "choose an empty or new --out folder")
        # An earlier doctor run: replace exactly its artifacts, nothing else.
        for name in _ARTIFACTS:
            path = out_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def _pick_fix(diagnosis: Any) -> str | None:
    from hlo_doctor.fixes import available_fixes

    known = set(available_fixes())
    # The fix that removes the most recoverable time (findings come sorted that way).
    for f in diagnosis.findings:
        if f.fix and f.fix in known:
            return str(f.fix)
    return None


def run_doctor(settings: DoctorSettings, progress: ProgressFn | None = None) -> DoctorResult:
    """Run the loop on ``settings.engine`` and write every artifact to ``settings.out_dir``."""
    from hlo_doctor.capture import capture_callable
    from hlo_doctor.diagnose import diagnose, load_context
    from hlo_doctor.engines import load_engine
    from hlo_doctor.fixes import FixApplied, apply_fix, patched_copy
    from hlo_doctor.render.diagnosis import to_json as diagnosis_json
    from hlo_doctor.render.diagnosis import to_markdown as diagnosis_md
    from hlo_doctor.rulebook import load_rulebook

    report = progress or (lambda stage, done, total: None)
    if settings.engine is not None and not Path(settings.engine).is_dir():
        raise InputError(f"--engine {settings.engine} is not a directory",
                         "pass an engine source tree (a copy of hlo_doctor/engine), or leave --engine out")
    out = _prepare_out(settings.out_dir)
    stages: list[tuple[str, float]] = []
    verify_settings = VerifySettings(
        fix=None, variant=settings.variant, baseline=settings.engine, rounds=settings.rounds, batch=settings.batch,
        max_tokens=settings.max_tokens, vocab=settings.vocab, out_dir=out / "verify",
        profile_steps=settings.verify_profile_steps, baseline_run=out / "profile", ttft_bound=settings.ttft_bound,
    )

    # 1. profile the baseline at the sizes verify will measure.
    t0 = time.perf_counter()
    module = load_engine(settings.engine)
    engine_dir = Path(module.__file__).resolve().parent  # type: ignore[arg-type]
    config = engine_config(module, verify_settings)
    target = module.profile_target(config)
    profile_run = capture_callable(
        target.step, steps=settings.profile_steps, warmup=1, out_dir=out / "profile", target=f"engine:{engine_dir}",
        config=json.loads(json.dumps(target.describe(), default=str)), warmup_fn=target.warmup,
        progress=lambda stage, done, total: report(f"profile: {stage}", done, total),
    )
    stages.append(("profile", time.perf_counter() - t0))

    # 2. diagnose it.
    t0 = time.perf_counter()
    report("diagnose", 0, 1)
    diagnosis = diagnose(load_context(profile_run), load_rulebook())
    (out / "diagnose.json").write_text(diagnosis_json(diagnosis))
    (out / "diagnose.md").write_text(diagnosis_md(diagnosis))
    report("diagnose", 1, 1)
    stages.append(("diagnose", time.perf_counter() - t0))

    fix_id = _pick_fix(diagnosis)
    fix_diff = ""
    treatment_dir: Path | None = None
    verify: VerifyReport | None = None
    if fix_id is not None:
        # 3. apply the fix to a copy (the engine's own tree is never written).
        t0 = time.perf_counter()
        report("apply-fix", 0, 1)
        dry = apply_fix(fix_id, engine_dir, variant=settings.variant, dry_run=True)
        fix_diff = dry.diff if isinstance(dry, FixApplied) else ""
        treatment_dir = patched_copy(fix_id, engine_dir, out / "treatment-engine", variant=settings.variant)
        (out / "fix.diff").write_text(fix_diff)
        report("apply-fix", 1, 1)
        stages.append(("apply-fix", time.perf_counter() - t0))

        # 4. verify baseline against the patched copy, in this process.
        t0 = time.perf_counter()
        verify = run_verify(dataclasses.replace(verify_settings, fix=fix_id, treatment=treatment_dir), progress)
        verify = dataclasses.replace(verify, fix_diff=fix_diff)
        (out / "verify.json").write_text(render_json(verify))
        (out / "verify.md").write_text(render_markdown(verify))
        stages.append(("verify", time.perf_counter() - t0))

    result = DoctorResult(settings=settings, engine_dir=str(engine_dir), profile_run=profile_run,
                          diagnosis=diagnosis, fix_id=fix_id, fix_diff=fix_diff, treatment_dir=treatment_dir,
                          verify=verify, stage_seconds=tuple(stages))
    (out / "report.md").write_text(render_report(result))
    (out / "doctor.json").write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n")
    return result


def _diff_stats(diff: str) -> list[tuple[str, int, int]]:
    """(file, lines added, lines removed) per file of a unified diff."""
    stats: list[tuple[str, int, int]] = []
    for line in diff.splitlines():
        if line.startswith("+++ "):
            stats.append((line[4:].removeprefix("b/"), 0, 0))
        elif stats and line.startswith("+") and not line.startswith("+++"):
            name, a, r = stats[-1]
            stats[-1] = (name, a + 1, r)
        elif stats and line.startswith("-") and not line.startswith("---"):
            name, a, r = stats[-1]
            stats[-1] = (name, a, r + 1)
    return stats


def render_report(result: DoctorResult) -> str:
    """``report.md``: what was found, what the fix changed, what it measured, the verdict."""
    d = result.diagnosis
    lines = [f"# hlo-doctor doctor: {result.verdict}", ""]
    lines.append(f"Engine `{result.engine_dir}`; artifacts in `{result.settings.out_dir}`; "
                 f"{result.elapsed_s:.0f} s in all (" +
                 ", ".join(f"{name} {s:.0f} s" for name, s in result.stage_seconds) + ").")
    lines += ["", "## 1. What was found", "",
              f"Diagnosis of the engine's own trace (`profile/`, {d.num_steps} decode steps, "
              f"backend {d.backend or '?'}): {d.summary_line()}.", ""]
    if d.findings:
        lines += ["| rule | op | shape | time/step | % of step | source | fix |", "|---|---|---|---:|---:|---|---|"]
        for f in d.findings:
            pct = "-" if f.pct_of_step is None else f"{f.pct_of_step:.1f}%"
            lines.append(f"| {f.code} | {f.module}/{f.op} | `{f.shape}` | {fmt_ms(f.time_per_step_us)} | {pct} | "
                         f"{f.source or '-'} | {f.fix or '-'} |")
    lines += ["", "## 2. What the fix changed", ""]
    if result.fix_id is None:
        lines.append("No bundled fix applies to these findings; nothing was changed.")
    else:
        lines.append(f"`hlo-doctor apply-fix {result.fix_id}` ({result.settings.variant} variant) on a copy of the "
                     f"engine (`treatment-engine/`; the original is untouched), diff in `fix.diff`:")
        lines.append("")
        for name, added, removed in _diff_stats(result.fix_diff):
            lines.append(f"- `{name}`: +{added} -{removed}")
    lines += ["", "## 3. What it measured", ""]
    v = result.verify
    if v is None:
        lines.append("Nothing to verify.")
    else:
        cfg = v.config
        lines.append(f"`hlo-doctor verify`: baseline and treatment in one process, each warmed up with its own "
                     f"precompiled menu, {v.settings.rounds} interleaved rounds each of the offline batch "
                     f"(batch {cfg.get('batch')}, vocab {cfg.get('vocab_size')}, {cfg.get('max_tokens')} tokens "
                     f"per request).")
        lines += ["", "| # | check | result | figure |", "|---|---|---|---|"]
        for c in v.checks:
            lines.append(f"| {c.number} | {c.name} | {'pass' if c.passed else '**FAIL**'} | "
                         f"{c.figure.replace('|', '/')} |")
        lines += ["", "| metric | baseline | treatment | ratio | 95% interval | outcome |",
                  "|---|---:|---:|---:|---|---|"]
        for row in metric_rows(v):
            lines.append("| " + " | ".join(x.replace("|", "/") for x in row) + " |")
        if v.removed_ops:
            lines += ["", "Wasteful ops of the baseline and what became of them in the treatment's own trace:", ""]
            for o in v.removed_ops:
                now = "" if o.status == "gone" else f" ({fmt_ms(o.treatment_time_per_step_us)} per step)"
                lines.append(f"- {o.code} `{o.module}/{o.op}` `{o.shape}`: {fmt_ms(o.time_per_step_us)} per step, "
                             f"{o.status}{now}")
    lines += ["", "## 4. Verdict", ""]
    if v is None:
        lines.append(result.verdict)
    else:
        failed = [c for c in v.checks if not c.passed]
        if not failed:
            tp = v.throughput
            change = (f"throughput {tp.outcome} (x{tp.ratio:.3f} median"
                      + ("" if not tp.tested else f", 95% CI [{tp.ci_low:.3f}, {tp.ci_high:.3f}]") + ")"
                      if tp is not None else "throughput not measured")
            lines.append(f"**PASS**: the fix stays on the precompiled menu, keeps the tokens and removes the wasteful "
                         f"ops from the trace; {change}.")
        else:
            lines.append("**FAIL**: " + "; ".join(f"check {c.number} ({c.name}): {c.figure}" for c in failed))
    return "\n".join(lines) + "\n"
