"""``run_program``: make the treatment, load both sides, measure them interleaved, capture, decide the checks.

Checks, each pass/fail with the figure that decided it:

1. **compiles**: no backend compile inside any measured round, in either side (JAX's reason when there is one);
2. **outputs identical**: every call's outputs, warm-up and rounds, bit for bit (or within the tolerance
   the user set); a difference names the round, the call and the first differing element; a step that
   raises fails here, naming the side and the call;
3. **treatment's findings**: every rule run on the treatment's capture; none of the fix's rules (or
   ``--rules``) may still find anything there (with ``--treatment`` alone: no finding the baseline had
   not); a fix placed by the baseline's findings is held to those findings, with or without ``--rules``
   ("at the fixed lines"); the figure says which findings remain;
4. **step-time verdict**: the core's step-time check (:func:`hlo_doctor.verify.checks.check_step_verdict`) on
   every call's time, rounds as blocks (:func:`hlo_doctor.verify.stats.compare_rounds`); with ``--budget``,
   pairs of rounds are added until it decides or the budget is spent. Each round's wall time is reported
   beside it (a call is the whole program here: nothing of it runs outside the step times).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import Finding
from hlo_doctor.statistics import Outcome, SampleComparison
from hlo_doctor.verify.checks import check_step_verdict, not_run
from hlo_doctor.verify.program.evidence import (
    Captured,
    capture_side,
    check_findings,
    removed_ops,
    slower_selections,
)
from hlo_doctor.verify.program.measure import Measured, ProgramRound, measure
from hlo_doctor.verify.program.results import ProgramReport, SideSummary
from hlo_doctor.verify.program.settings import ProgramSettings, validate_program_settings
from hlo_doctor.verify.program.sites import refuse_installed, sites_from_findings
from hlo_doctor.verify.program.target import (
    FixedCopy,
    Side,
    check_fix_target,
    load_side,
    make_fixed_copy,
    split_spec,
)
from hlo_doctor.verify.results import Check
from hlo_doctor.verify.settings import ProgressFn
from hlo_doctor.verify.stats import alpha_at_look, compare_rounds
from hlo_doctor.verify.workspace import workspace

NAMES = {1: "steady-state compiles", 2: "outputs identical", 3: "treatment's findings", 4: "step-time verdict"}


def _load(settings: ProgramSettings, work: Path,
          progress: ProgressFn) -> tuple[Side, Side, FixedCopy | None, Captured | None]:
    """Both sides, the treatment made first where it can be (a fix that does not apply is refused before
    anything is imported). Without ``--fix-line`` the baseline is loaded and captured first: its findings
    name the lines the fix is applied at; that capture is returned, to be the baseline's evidence."""
    from hlo_doctor.capture import keep_gpu_ops_visible

    from_findings = settings.fix is not None and settings.fix_line is None
    fixed = None
    if settings.fix is not None and not from_findings:
        fixed = make_fixed_copy(settings.baseline, settings.fix, work, line=settings.fix_line,
                                argument=settings.fix_arg)
    elif settings.fix is not None:
        # Only what needs no finding is checked before the import (the fix, the file): whether the
        # codemod matches depends on the line and the argument a finding names.
        refuse_installed(check_fix_target(settings.baseline, settings.fix), settings.fix)
    keep_gpu_ops_visible()  # before the targets' imports start a backend: per-op events stay in the trace
    base = load_side("baseline", settings.baseline)
    early = None
    if settings.fix is not None and from_findings:
        # Warmed by one untraced call; the profiler stops before any measured round starts.
        early = capture_side(base, work / "baseline-run", settings.profile_steps, progress, warmup=1)
        if early.evidence.error:
            raise InputError(f"--fix {settings.fix} without --fix-line: the baseline's capture, whose findings name "
                             f"the lines to fix, failed: {early.evidence.error}", "pass --fix-line LINE")
        sites = sites_from_findings(early.evidence.findings, settings.fix, Path(split_spec(settings.baseline)[0]))
        fixed = make_fixed_copy(settings.baseline, settings.fix, work, sites=sites)
    if fixed is not None:
        treat = load_side("treatment", fixed.spec, shown=f"{fixed.original} with {settings.fix}",
                          neighbours=fixed.original.parent)
    else:
        assert settings.treatment is not None
        treat = load_side("treatment", settings.treatment)
    return base, treat, fixed, early


def _as_original(captured: Captured, fixed: FixedCopy) -> Captured:
    """The treatment's findings with the fixed copy's path read as the user's file (the copy goes away
    with the work folder; the line a person reads is in their file, shifted by the fix's edits at most)."""
    copy, original = fixed.spec.rpartition(":")[0], str(fixed.original)

    def mapped(f: Finding) -> Finding:
        return dataclasses.replace(f, source=f.source.replace(copy, original), message=f.message.replace(copy, original),
                                   stack=tuple((file.replace(copy, original), line, fn) for file, line, fn in f.stack))

    ev = captured.evidence
    return Captured(dataclasses.replace(ev, findings=tuple(mapped(f) for f in ev.findings)), captured.table)


def rules_of(settings: ProgramSettings) -> tuple[str, ...]:
    """The rules check 3 holds the treatment to: ``--rules``, else the fix's rules, else none."""
    from hlo_doctor.fixes.catalog import catalog_entry
    from hlo_doctor.lint import load_rulebook

    rules = settings.rules or (catalog_entry(settings.fix).rules if settings.fix else ())
    load_rulebook().select(rules)  # an unknown code is bad input, named before anything runs
    return tuple(rules)


def run_program(settings: ProgramSettings, progress: ProgressFn | None = None) -> ProgramReport:
    """Compare ``settings.baseline`` with its treatment (a fixed copy or another target) in this process.

    Raises :class:`~hlo_doctor.core.errors.InputError` before anything runs for unusable settings, a fix
    that does not apply to the file, or a target that cannot be imported.
    """
    import jax

    validate_program_settings(settings)
    report = progress or (lambda stage, done, total: None)
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    rules = rules_of(settings)
    with workspace(settings.out_dir) as work:
        base, treat, fixed, early = _load(settings, work, report)
        measured = measure(base, treat, settings, report,
                           lambda m, look: step_comparison(settings, m, look).outcome != Outcome.INCONCLUSIVE)
        b_sum, t_sum = (SideSummary(s.label, s.spec, s.source, measured.warmup_s.get(s.label, 0.0),
                                    tuple(measured.rounds[s.label])) for s in (base, treat))
        notes = list(fixed.notes) if fixed is not None else []
        if fixed is not None and not fixed.safe:
            notes.append(f"{settings.fix} is an unsafe fix here (it can change a value in a case the source does not "
                         "rule out): check 2 is what shows that the outputs stayed the same")
        captured: tuple[Captured, Captured] | None = None
        if measured.raised is None:
            # After the rounds: the profiler never runs inside a measured round.
            captured = (early or capture_side(base, work / "baseline-run", settings.profile_steps, report),
                        capture_side(treat, work / "treatment-run", settings.profile_steps, report))
            if fixed is not None:
                captured = (captured[0], _as_original(captured[1], fixed))
    step_time = round_time = None
    if captured is None:
        assert measured.raised is not None
        why = measured.raised.describe()
        findings, verdict = not_run(3, NAMES[3], why), not_run(4, NAMES[4], why)
    else:
        # A fix placed by the findings answers for those findings; --rules only says which rules count.
        targets = [t for site in fixed.sites for t in site.targets] if fixed else []
        findings = check_findings(captured[0].evidence, captured[1].evidence, rules, targets)
        notes += slower_selections(captured[0].evidence, captured[1].evidence, jax.default_backend())
        step_time, round_time, verdict = _verdict(settings, measured)
    return ProgramReport(
        settings=settings, baseline=b_sum, treatment=t_sum,
        checks=(_check_compiles(measured), _check_outputs(measured, settings), findings, verdict),
        step_time=step_time, round_time=round_time,
        baseline_hlo=captured[0].evidence if captured else None, treatment_hlo=captured[1].evidence if captured else None,
        removed_ops=removed_ops(*captured) if captured else (), outputs=_outputs(measured, settings),
        fix_diff=fixed.diff if fixed else "", fix_safe=fixed.safe if fixed else None,
        fix_sites=fixed.sites if fixed else (),
        elapsed_s=time.perf_counter() - started, backend=jax.default_backend(),
        load_average=(load_start, os.getloadavg()[0]), notes=tuple(notes), stopping=measured.stopping)


def _alpha(settings: ProgramSettings, looks: int) -> float:
    """The last look's significance level: the settings' alpha, spent over the looks with a budget."""
    return settings.alpha if settings.budget_s is None else alpha_at_look(settings.alpha, looks)


def step_comparison(settings: ProgramSettings, measured: Measured, looks: int) -> SampleComparison:
    """Check 4's statistic: every call's time, rounds as blocks, paired round by round."""
    return compare_rounds(settings, [r.step_times_ms for r in measured.rounds["baseline"]],
                          [r.step_times_ms for r in measured.rounds["treatment"]], alpha=_alpha(settings, looks))


def _verdict(settings: ProgramSettings, measured: Measured) -> tuple[SampleComparison, SampleComparison, Check]:
    """Check 4 on the step times; each round's wall time compared the same way, for the table."""
    looks = measured.stopping.looks if measured.stopping is not None else 1
    step_time = step_comparison(settings, measured, looks)
    round_time = compare_rounds(settings, [[r.wall_ms] for r in measured.rounds["baseline"]],
                                [[r.wall_ms] for r in measured.rounds["treatment"]], alpha=_alpha(settings, looks))
    check = check_step_verdict(step_time, None, settings.require_improvement, measured.stopping, step="step")
    return step_time, round_time, dataclasses.replace(check, number=4, name=NAMES[4])


def _check_compiles(measured: Measured) -> Check:
    """Check 1: no backend compile inside a measured round (JAX's reason for each one)."""
    parts, reasons = [], []
    for label in ("treatment", "baseline"):
        rounds: list[ProgramRound] = measured.rounds[label]
        parts.append(f"{label} {sum(len(r.compiles) for r in rounds)}")
        reasons += [f"{label} round {r.index + 1}: {'; '.join(r.compiles)}" for r in rounds if r.compiles]
    if reasons:
        return Check(1, NAMES[1], False, ", ".join(parts), " | ".join(reasons))
    return Check(1, NAMES[1], True, ", ".join(parts), "every measured call ran on programs compiled in the warm-up")


def _outputs(measured: Measured, settings: ProgramSettings) -> str:
    how = "bit for bit" if settings.bitwise else f"within rtol={settings.rtol:g}, atol={settings.atol:g}"
    return f"{how}, {measured.compared} call(s) compared"


def _check_outputs(measured: Measured, settings: ProgramSettings) -> Check:
    """Check 2: the outputs of every call the same on both sides; a raise or the first difference fails it."""
    how = "bit-identical" if settings.bitwise else f"equal within rtol={settings.rtol:g}, atol={settings.atol:g}"
    if measured.raised is not None:
        r = measured.raised
        return Check(2, NAMES[2], False, f"{r.variant} raised in {r.when}", r.describe())
    if measured.mismatch is not None:
        m = measured.mismatch
        return Check(2, NAMES[2], False, f"differ in {m.when}", m.describe())
    return Check(2, NAMES[2], True, f"{how} in {measured.compared}/{measured.compared} calls",
                 "warm-up calls and every measured call compared")
