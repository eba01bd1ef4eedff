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
      report.html         the same with charts, one self-contained page
      doctor.json         the same as data

An existing OUT is reused only when it holds an earlier doctor run (``doctor.json``) or is empty.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.core import outdir
from hlo_doctor.core.atomic import write_atomically as _write_atomically
from hlo_doctor.core.errors import ExitCode, InputError
from hlo_doctor.core.model import ProgressFn
from hlo_doctor.render.diagnosis import to_json as diagnosis_json
from hlo_doctor.render.diagnosis import to_markdown as diagnosis_md
from hlo_doctor.render.doctor import JSON_SCHEMA
from hlo_doctor.render.doctor import to_json as render_doctor_json
from hlo_doctor.render.doctor import to_markdown as render_report
from hlo_doctor.render.html.subjects import doctor_html
from hlo_doctor.render.verify import to_json as render_json
from hlo_doctor.render.verify import to_markdown as render_markdown
from hlo_doctor.verify import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROFILE_STEPS,
    DEFAULT_ROUNDS,
    DEFAULT_TTFT_BOUND,
    VerifyReport,
    VerifySettings,
    engine_config,
    run_verify,
)

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis
    from hlo_doctor.lint.store import MeasurementStore

__all__ = ["JSON_SCHEMA", "DoctorResult", "DoctorSettings", "run_doctor"]


_ARTIFACTS = ("profile", "diagnose.json", "diagnose.md", "fix.diff", "treatment-engine", "verify", "verify.json",
              "verify.md", "report.md", "report.html", "doctor.json")


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
    diagnosis: Diagnosis
    """The diagnosis of the baseline's trace."""
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

    def estimate(self) -> dict[str, Any] | None:
        """Diagnose's promise for the applied fix against the savings verify measured, ms per step:
        the decode step (verify's verdict statistic, the paired ratio, applied to the baseline's median
        decode step, no profiler; the medians' difference beside it) and the profiled step (the
        baseline's and the treatment's captures); None without a fix or a verify."""
        if self.fix_id is None or self.verify is None:
            return None
        promise = next((p for p in self.diagnosis.fixes if p.fix == self.fix_id), None)
        steps = self.verify.profiled_step()
        measured = {}
        for key in ("decode_step_ms", "profiled_step_ms"):
            b, t = steps[key]["baseline"], steps[key]["treatment"]
            measured[key] = None if b is None or t is None else b - t
        medians = measured["decode_step_ms"]
        # The saving is the verdict's own statistic, so that it lies inside the interval below and the
        # two cannot read as contradicting (the medians' ratio can part from the paired ratio).
        st = self.verify.step_time
        b_step = steps["decode_step_ms"]["baseline"]
        if st is not None and b_step is not None and math.isfinite(st.ratio):
            measured["decode_step_ms"] = b_step * (1 - st.ratio)
        # A decode-step saving the paired rounds do not show is no measurement: it is said as such.
        if st is None or not st.significant:
            measured["decode_step_ms"] = None
            medians = None
        net = None if promise is None else promise.net_us / 1e3
        rng = None if promise is None else promise.interval_us
        # The saving the verdict's statistic allows: its ratio's interval applied to the baseline's
        # median decode step. A point difference of a few noisy rounds says little alone; the promise
        # is judged against this interval.
        span = None
        if st is not None and st.tested and not math.isnan(st.ci_low) and st.baseline_median > 0:
            span = [st.baseline_median * (1 - st.ci_high), st.baseline_median * (1 - st.ci_low)]
        return {
            "promised_ms": net,
            "promise": None if promise is None else promise.verdict,
            # The range of the figure the promise is (the program A/B's, the replay's or the what-if's).
            "promised_range_ms": None if rng is None else [rng[0] / 1e3, rng[1] / 1e3],
            "how": None if promise is None else promise.how,
            "measured_by": None if promise is None else _measured_by(promise),
            "recovered_ms": None if promise is None else promise.recoverable_us / 1e3,
            "cost_ms": None if promise is None else promise.cost_us / 1e3,
            "decode_step": "not measured" if st is None else (
                f"{'changed' if st.significant else 'no significant change'} ({st.ratio_text()})"),
            "measured_decode_step_ms": measured["decode_step_ms"],
            "measured_decode_step_medians_ms": medians,
            "measured_decode_step_range_ms": span,
            "promise_in_measured_range": None if net is None or span is None else span[0] <= net <= span[1],
            "ranges_overlap": None if rng is None or span is None else
            rng[0] / 1e3 <= span[1] and span[0] <= rng[1] / 1e3,
            "measured_profiled_step_ms": measured["profiled_step_ms"],
            "promise_over_decode_step": net / measured["decode_step_ms"]
            if net is not None and measured["decode_step_ms"] else None,
            "promise_over_profiled_step": net / measured["profiled_step_ms"]
            if net is not None and measured["profiled_step_ms"] else None,
        }

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
            "estimate": self.estimate(),
            "verify": None if self.verify is None else {
                "passed": self.verify.passed, "verdict": self.verify.verdict,
                "checks": [c.to_dict() for c in self.verify.checks],
                "removed_time_per_step_us": self.verify.removed_time_per_step_us,
            },
            "stage_seconds": dict(self.stage_seconds), "elapsed_s": self.elapsed_s, "settings": s,
        }


def _prepare_out(out_dir: Path) -> Path:
    out_dir = Path(out_dir).absolute()
    outdir.check_replaceable(out_dir, "doctor")
    if out_dir.exists():
        # An earlier doctor run: replace exactly its artifacts, nothing else.
        for name in _ARTIFACTS:
            path = out_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    return outdir.claim(out_dir, "doctor")


def _pick_fix(diagnosis: Diagnosis) -> str | None:
    from hlo_doctor.fixes import available_fixes

    known = set(available_fixes())
    # The fix that removes the most recoverable time (findings come sorted that way).
    for f in diagnosis.findings:
        if f.fix and f.fix in known:
            return str(f.fix)
    return None


def run_doctor(settings: DoctorSettings, progress: ProgressFn | None = None) -> DoctorResult:
    """Run the loop on ``settings.engine`` and write every artifact to ``settings.out_dir``."""
    from hlo_doctor.engines import load_engine
    from hlo_doctor.fixes import FixApplied, apply_fix, patched_copy
    from hlo_doctor.lint import diagnose, load_context, load_rulebook
    from hlo_doctor.lint.activity import reported_to
    from hlo_doctor.lint.measurement import measure_budget
    from hlo_doctor.lint.store import MeasurementStore
    from hlo_doctor.verify.engine.capture_child import capture_apart

    report = progress or (lambda stage, done, total: None)
    budget_s = measure_budget()
    if settings.engine is not None and not Path(settings.engine).is_dir():
        raise InputError(f"--engine {settings.engine} is not a directory",
                         "pass an engine source tree (a copy of hlo_doctor/engine), or leave --engine out")
    # A folder the user named as a link stays theirs to follow; one hlo-doctor made is never followed
    # again (a link planted at its path while the loop runs: write_atomically's folder_no_link).
    given_as_link = Path(settings.out_dir).absolute().is_symlink()
    out = _prepare_out(settings.out_dir)
    write_atomically = functools.partial(_write_atomically, folder_no_link=not given_as_link)
    stages: list[tuple[str, float]] = []
    verify_settings = VerifySettings(
        fix=None, variant=settings.variant, baseline=settings.engine, rounds=settings.rounds, batch=settings.batch,
        max_tokens=settings.max_tokens, vocab=settings.vocab, out_dir=out / "verify",
        profile_steps=settings.verify_profile_steps, baseline_run=out / "profile", ttft_bound=settings.ttft_bound,
    )

    # Each step is a stage of its own (``profile (step 1 of 4)`` ... ``verify (step 4 of 4) done``), so a
    # progress line between two of a step's inner stages names the step that runs and how many follow.
    def phase(name: str, number: int, done: bool) -> None:
        report(f"{name} (step {number} of 4)", 1 if done else 0, 1)

    # 1. profile the baseline at the sizes verify will measure.
    t0 = time.perf_counter()
    phase("profile", 1, False)
    module = load_engine(settings.engine)
    engine_dir = Path(module.__file__).resolve().parent  # type: ignore[arg-type]
    config = engine_config(module, verify_settings)
    # In a process of its own: a process that ran the profiler measures slower afterwards (on a TPU,
    # in episodes: verify.engine.capture_child), and verify's rounds run in this one.
    profile_run = capture_apart(
        settings.engine, config, name=f"engine:{engine_dir}", out_dir=out / "profile", steps=settings.profile_steps,
        progress=lambda stage, done, total: report(f"profile: {stage}", done, total),
    )
    phase("profile", 1, True)
    stages.append(("profile", time.perf_counter() - t0))

    # 2. diagnose it.
    t0 = time.perf_counter()
    phase("diagnose", 2, False)
    # What-if runs price what the capture cannot (lint.whatif): the promise then holds its costs too.
    # Measured once per capture and kept with it (lint.store): the profile's own folder, else the cache.
    store = MeasurementStore(profile_run)
    # (each fix it times here is a stage of its own: "diagnose: measuring ...")
    with reported_to(lambda stage, done, total: report(f"diagnose: {stage}", done, total)):
        diagnosis = diagnose(dataclasses.replace(load_context(profile_run), what_if=True, measurements=store,
                                                 measure_seconds=budget_s),
                             load_rulebook())
    write_atomically(out / "diagnose.json", diagnosis_json(diagnosis))
    write_atomically(out / "diagnose.md", diagnosis_md(diagnosis))
    phase("diagnose", 2, True)
    stages.append(("diagnose", time.perf_counter() - t0))

    fix_id = _pick_fix(diagnosis)
    fix_diff = ""
    treatment_dir: Path | None = None
    verify: VerifyReport | None = None
    if fix_id is not None:
        # 3. apply the fix to a copy (the engine's own tree is never written).
        t0 = time.perf_counter()
        phase("apply-fix", 3, False)
        dry = apply_fix(fix_id, engine_dir, variant=settings.variant, dry_run=True)
        fix_diff = dry.diff if isinstance(dry, FixApplied) else ""
        treatment_dir = patched_copy(fix_id, engine_dir, out / "treatment-engine", variant=settings.variant)
        write_atomically(out / "fix.diff", fix_diff)
        phase("apply-fix", 3, True)
        stages.append(("apply-fix", time.perf_counter() - t0))

        # 4. verify baseline against the patched copy, in this process.
        t0 = time.perf_counter()
        phase("verify", 4, False)
        verify = run_verify(dataclasses.replace(verify_settings, fix=fix_id, treatment=treatment_dir), progress)
        phase("verify", 4, True)
        verify = dataclasses.replace(verify, fix_diff=fix_diff)
        # Kept with the baseline profile: a later `diagnose` of OUT prices the fix by these rounds.
        keep_verified(profile_run, fix_id, verify, store)
        write_atomically(out / "verify.json", render_json(verify))
        write_atomically(out / "verify.md", render_markdown(verify))
        stages.append(("verify", time.perf_counter() - t0))

    result = DoctorResult(settings=settings, engine_dir=str(engine_dir), profile_run=profile_run,
                          diagnosis=diagnosis, fix_id=fix_id, fix_diff=fix_diff, treatment_dir=treatment_dir,
                          verify=verify, stage_seconds=tuple(stages))
    write_atomically(out / "report.md", render_report(result))
    write_atomically(out / "doctor.json", render_doctor_json(result))
    stats_json = profile_run / "opstats.json"
    write_atomically(out / "report.html", doctor_html(
        render_doctor_json(result), diagnosis_json(diagnosis), stats_json.read_text() if stats_json.is_file() else None,
        render_json(verify) if verify is not None else None))
    return result


def keep_verified(profile_run: Path, fix_id: str, verify: VerifyReport, store: MeasurementStore) -> bool:
    """Keep verify's rounds of ``fix_id`` (the ``full`` variant, its checks 1-4 passed) in the
    baseline profile's measurement store under the engine A/B's key (:func:`.lint.engine_ab.verified_key`),
    so that ``diagnose OUT`` promises what verify measured, not a shorter A/B of its own. True when kept."""
    from hlo_doctor.lint.engine_ab import (
        VERIFIED_KIND,
        EngineTarget,
        bundled_engine_dir,
        engine_target,
        verified_key,
    )
    from hlo_doctor.lint.measurement import Measurement
    from hlo_doctor.verify.stats import rounds_measurement

    if verify.settings.variant != "full" or verify.verdict.startswith("FAIL") or not verify.baseline.rounds:
        return False
    where = engine_target(profile_run, bundled_engine_dir())
    if not isinstance(where, EngineTarget):
        return False
    stopping = verify.stopping
    budget = stopping.budget_s if stopping is not None and stopping.budget_s else 0.0
    doc = {"baseline": [list(r.step_times_ms) for r in verify.baseline.rounds],
           "treatment": [list(r.step_times_ms) for r in verify.treatment.rounds],
           "looks": stopping.looks if stopping is not None else 1,
           **({"alpha": verify.step_time.alpha} if verify.step_time is not None else {}),
           "stopped": "verify's rounds" + ("" if stopping is None or stopping.reason == "fixed" else f", {stopping.reason}")}
    made = rounds_measurement(VERIFIED_KIND, verified_key(fix_id, where), doc, budget, store)
    if not isinstance(made, Measurement):
        return False
    store.record(made)
    return True


def _measured_by(promise: Any) -> str | None:
    """How the promise was measured here, in the words of its own line (None for a model)."""
    if promise.program is not None and not promise.replay_stands:
        return str(promise.program.line())
    if promise.replay is not None:
        return str(promise.replay.line())
    return "; ".join(promise.measured) or None
