"""Running the rules: :func:`diagnose` turns a Context and a RuleBook into a :class:`Diagnosis`.

One finding per cause: the same rule on the same op of a program recompiled under several program
ids gives one finding, with the ids and the time summed over the copies, and one rule's findings on
one source line of one program are one finding (:mod:`hlo_doctor.lint.merge`).
The summary's recoverable time counts each op once, even when two rules flag it (the larger
estimate wins). Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import math
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hlo_doctor.core.format import fmt_duration, fmt_source
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.hlo import HloInstruction, HloModule, fused_opcodes
from hlo_doctor.lint.compiles import CompileAccount, compile_account
from hlo_doctor.lint.context import Context
from hlo_doctor.lint.loader import LoadedRule, RuleBook
from hlo_doctor.lint.merge import merge_memory, merge_recompiled, merge_same_line
from hlo_doctor.lint.promise import FixPromise, fix_promises, total_recoverable, with_replays
from hlo_doctor.lint.remedies import with_library_remedy
from hlo_doctor.lint.severity import with_cost_severity
from hlo_doctor.lint.stage import stages_line


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The result of a diagnosis: findings (most recoverable first) and the summary figures."""

    findings: tuple[Finding, ...]
    step_time_us: float | None
    recoverable_us: float | None
    """Sum over distinct ops of the largest recoverable estimate (None without op stats)."""
    num_steps: int
    origin: str
    kind: str
    backend: str
    rules_run: tuple[str, ...]
    rules_skipped: tuple[tuple[str, str], ...] = ()
    """(code, reason) for rules whose inputs were missing."""
    modules: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    compiler_inserted_us: float | None = None
    """Time per step in converts/copies the compiler inserted (no metadata) that no finding covers."""
    compiler_inserted_ops: int = 0
    stage_line: str = ""
    """Which modules are unoptimized HLO (as lowered), empty when all are optimized (see :mod:`.stage`)."""
    compiles: CompileAccount | None = None
    """Programs compiled inside the window and eager ops compiled apart (see :mod:`.compiles`)."""
    fix_promises: tuple[FixPromise, ...] = ()
    """Each fix the rules offered, with what its findings recover and what it costs here."""
    removed: tuple[FixPromise, ...] = ()
    """Findings no bundled fix answers (a library's code, a remedy to make by hand) whose waste a
    replay of the capture's programs removed here: what removing it measured (:func:`replay_unfixed`)."""
    step_basis: str = ""
    """What the step divided by is (``mean of 5 traced step annotations``); "" when the input says
    nothing of its steps (an ``opstats.json`` export, HLO text)."""
    capture: tuple[str, ...] = ()
    """The files read, relative to the working folder (:attr:`Context.capture`)."""
    capture_via: str = ""
    """Why they are not the input given (a doctor or verify folder's baseline); "" when they are."""

    @property
    def fixes(self) -> tuple[FixPromise, ...]:
        """What each offered fix promises per step (:mod:`.promise`): counted over the findings whose
        rule offered it (a tree fix such as ``bf16-greedy-sampler`` also removes the copy of a
        finding with no source line of its own), for the fixes some finding still offers."""
        offered = {f.fix for f in self.findings if f.fix}
        return tuple(p for p in self.fix_promises if p.fix in offered)

    def fixes_line(self) -> str:
        """The promise of each fix that a what-if run priced here (a cost, or a figure measured here,
        with its label), that a replay measured, or that a replay could not (the reason); "" when none."""
        return "; ".join([p.line(self.step_time_us) for p in self.fixes
                          if p.cost_us > 0 or p.measured or p.replay is not None or p.unmeasured]
                         + [p.line(self.step_time_us) for p in self.removed])

    def compile_line(self) -> str:
        """``compiles in the window: jit_f 3 (on every call); 27 eager ops compiled (1.2 s)``, or ""."""
        return self.compiles.line() if self.compiles is not None else ""

    def compiler_inserted_line(self) -> str:
        """``gpu: 2% of the step (31 us) is in 3 converts/copies the compiler inserted; no source line``."""
        if not self.compiler_inserted_ops or self.compiler_inserted_us is None or not self.step_time_us:
            return ""
        pct = 100.0 * self.compiler_inserted_us / self.step_time_us
        n = self.compiler_inserted_ops
        share = f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"
        return (f"{self.backend or 'unknown backend'}: {share} of the step ({fmt_duration(self.compiler_inserted_us)}) "
                f"is in {n} convert{'s' if n != 1 else ''}/cop{'ies' if n != 1 else 'y'} the compiler "
                f"inserted; no source line, no finding")

    @property
    def recoverable_pct(self) -> float | None:
        if self.recoverable_us is None or not self.step_time_us:
            return None
        return 100.0 * self.recoverable_us / self.step_time_us

    def at_or_above(self, severity: Severity) -> list[Finding]:
        return [f for f in self.findings if f.severity >= severity]

    def summary_line(self) -> str:
        """``~3.1 ms of ~26.5 ms per step (~12%) is recoverable``, or a count without op stats."""
        n = len(self.findings)
        if n == 0:
            return "no findings"
        head = f"{n} finding{'s' if n != 1 else ''}"
        if self.recoverable_us is None or not self.step_time_us:
            return f"{head} (no op stats: no time estimate)"
        pct = self.recoverable_pct or 0.0
        basis = f"; step: {self.step_basis}" if self.step_basis else ""
        return (f"{head}: ~{fmt_duration(self.recoverable_us)} of ~{fmt_duration(self.step_time_us)} per step "
                f"(~{pct:.0f}%{basis}) is recoverable")

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.origin, "input_kind": self.kind,
            "capture": {"files": list(self.capture), "via": self.capture_via}, "backend": self.backend,
            "step_time_us": self.step_time_us, "step_basis": self.step_basis, "num_steps": self.num_steps,
            "recoverable_us": self.recoverable_us, "recoverable_pct": self.recoverable_pct,
            "summary": self.summary_line(), "rules_run": list(self.rules_run),
            "rules_skipped": [{"code": c, "reason": r} for c, r in self.rules_skipped],
            "modules": list(self.modules),
            "compiler_inserted_us": self.compiler_inserted_us,
            "compiler_inserted_ops": self.compiler_inserted_ops,
            "stage": self.stage_line,
            **(self.compiles.to_dict() if self.compiles is not None
               else {"compiles": [], "eager_compiles": {"count": 0, "time_us": 0.0, "ops": {}}}),
            "fixes": [p.to_dict() for p in self.fixes],
            "removed_by_replay": [p.to_dict() for p in self.removed],
            "findings": [f.to_dict() for f in self.findings],
        }


def run_rule(rule: LoadedRule | type[Any], ctx: Context) -> list[Finding]:
    """Run one rule; a crash becomes one internal-error finding (Severity.ERROR), never an exception."""
    cls = rule.rule if isinstance(rule, LoadedRule) else rule
    try:
        return [_checked_result(cls, rule, item) for item in cls().check(ctx)]
    except Exception as exc:  # noqa: BLE001 - a rule's bug must not abort the diagnosis
        tb = traceback.format_exc().strip().splitlines()
        return [Finding(
            code=cls.code, name=cls.name, severity=Severity.ERROR,
            message=f"rule {cls.code} crashed: {type(exc).__name__}: {exc}",
            source=str(getattr(rule, "path", "")), evidence=tuple(tb[-4:]),
            extra=(("internal_error", True),),
        )]


def _bad_number(value: Any) -> bool:
    return value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0)


def _checked_result(cls: Any, rule: LoadedRule | type[Any], item: Any) -> Finding:
    """``item`` when it is a sane :class:`Finding`; else an HD000 error finding naming the rule.

    A user rule is code the diagnosis must survive: something that is not a Finding, or a Finding whose
    times are NaN, infinite or negative (which would print "-1910% recoverable"), is reported as the
    rule's error and the other rules still run.
    """
    problem = ""
    if not isinstance(item, Finding):
        problem = f"yielded a {type(item).__name__}, not a Finding"
    else:
        bad = [name for name in ("time_per_step_us", "pct_of_step", "recoverable_us", "bytes_accessed")
               if _bad_number(getattr(item, name))]
        if bad:
            problem = "yielded a Finding with " + ", ".join(f"{n}={getattr(item, n)!r}" for n in bad) + \
                      " (must be a finite number >= 0 or None)"
        elif not all(isinstance(getattr(item, n), str) for n in ("code", "name", "message", "module", "op",
                                                                  "shape", "source")):
            problem = "yielded a Finding whose code, name, message, module, op, shape or source is not text"
    if not problem:
        return item
    return Finding(
        code="HD000", name="internal.rule-result-error", severity=Severity.ERROR,
        message=f"rule {getattr(cls, 'code', '?')} {problem}",
        source=str(getattr(rule, "path", "")), extra=(("internal_error", True),),
    )


def diagnose(ctx: Context, rulebook: RuleBook, *, select: Iterable[str] = (),
             ignore: Iterable[str] = ()) -> Diagnosis:
    """Run the selected rules over ``ctx`` and summarize."""
    t0 = time.perf_counter()
    rules = rulebook.select(select, ignore)
    findings: list[Finding] = [e.to_finding() for e in rulebook.errors]
    run: list[str] = []
    skipped: list[tuple[str, str]] = []
    for r in rules:
        missing = [req for req in r.rule.requires if not ctx.provides(req)]
        if missing:
            reason = "needs " + ", ".join(_REQUIREMENT_WORDS.get(m, m) for m in missing)
            # A trace JSON has op times but never the modules: say why they are missing.
            skipped.append((r.code, reason + (" (none in a trace JSON)" if "hlo" in missing and ctx.kind == "trace-json"
                                              else "")))
            continue
        run.append(r.code)
        findings.extend(run_rule(r, ctx))
    findings = [with_library_remedy(with_cost_severity(f, ctx.step_time_us, _category(ctx, f), ctx.step_times_us))
                for f in merge_memory(merge_same_line(merge_recompiled(findings)))]
    findings.sort(key=lambda f: (-(f.recoverable_us or 0.0), -int(f.severity), f.code, f.module, f.op))
    inserted_us, inserted_ops = compiler_inserted(ctx, findings)
    return Diagnosis(
        findings=tuple(findings), step_time_us=ctx.step_time_us,
        recoverable_us=total_recoverable(findings) if ctx.has_opstats else None,
        num_steps=ctx.num_steps, origin=ctx.origin, kind=ctx.kind, backend=ctx.backend,
        rules_run=tuple(run), rules_skipped=tuple(skipped),
        modules=tuple(m.name if m.program_id is None else f"{m.name}({m.program_id})" for m in ctx.modules),
        elapsed_s=time.perf_counter() - t0,
        compiler_inserted_us=inserted_us if ctx.has_opstats else None, compiler_inserted_ops=inserted_ops,
        stage_line=stages_line(ctx.modules, ctx.origin),
        compiles=compile_account(ctx) if ctx.compile_events else None,
        step_basis=step_basis(ctx),
        fix_promises=promises(ctx, findings),
        capture=ctx.capture, capture_via=ctx.capture_via,
    )


def promises(ctx: Context, findings: Iterable[Finding]) -> tuple[FixPromise, ...]:
    """Each fix's promise; with what-if runs on, measured by a replay of the capture's programs
    where this machine can run them (:mod:`hlo_doctor.lint.replay`), else a model that says why.
    Called again where a finding's fix is chosen anew (the fix whose codemod matches its line)."""
    findings = list(findings)
    promises = fix_promises(findings) if ctx.has_opstats else ()
    if not promises or not ctx.what_if:
        return promises
    from hlo_doctor.lint.replay import measure_fix

    return with_replays(promises, findings, lambda fix, fs: measure_fix(ctx, fix, fs))


def replayed(ctx: Context, fix_promises: tuple[FixPromise, ...], findings: Iterable[Finding]) -> tuple[FixPromise, ...]:
    """``fix_promises`` with each that no replay has tried yet (a fix offered only once the fixes
    that apply to the code at hand are known) measured as :func:`promises` measures them."""
    fresh = tuple(p for p in fix_promises if p.replay is None and not p.unmeasured)
    if not ctx.what_if or not fresh:
        return fix_promises
    from hlo_doctor.lint.replay import measure_fix

    done = {p.fix: p for p in with_replays(fresh, findings, lambda fix, fs: measure_fix(ctx, fix, fs))}
    return tuple(sorted((done.get(p.fix, p) for p in fix_promises), key=lambda p: (-p.net_us, p.fix)))


def replay_unfixed(ctx: Context, diagnosis: Diagnosis) -> Diagnosis:
    """``diagnosis`` with each finding in a library's code (a remedy, no fix) whose change a replay
    makes (an order-keeping map before an argmax in a library's sampler, say), measured by that replay here:
    what removing its waste gives back per step (``removed``). A capture no replay can run on this
    machine is left as it was; a finding whose replay could not be made or does not stand for the
    capture keeps the rule's model there, saying so and why (``unmeasured``)."""
    from hlo_doctor.lint.replay import measure_fix, replay_refusal
    from hlo_doctor.lint.replay.plan import REPLAYED

    if not ctx.what_if or not ctx.has_opstats or replay_refusal(ctx):
        return diagnosis
    out = []
    for f in diagnosis.findings:
        # Only waste in a library's code (its remedy named): the project's own findings have fixes,
        # and a copy with no line of its own is measured with the fix that removes it.
        if f.fix or not f.remedy or f.code not in REPLAYED or not f.recoverable_us:
            continue
        where = fmt_source(f.source) if f.source else f"{f.module}/{f.op}"
        got = measure_fix(ctx, f"{f.code}@{where}", [f])
        label = f"{f.code} at {where}, removed"
        if isinstance(got, str):
            out.append(FixPromise(f"{f.code}@{where}", 1, f.recoverable_us, 0.0, unmeasured=got, label=label))
            continue
        out.append(FixPromise(got.fix, 1, f.recoverable_us, 0.0, replay=got, label=label))
    return dataclasses.replace(diagnosis, removed=tuple(sorted(out, key=lambda p: (-p.net_us, p.fix))))


_STEP_SOURCES = {
    "annotation": "mean of {n} traced step annotations",
    "device-steps": "mean of {n} traced device steps (the devices' Steps line)",
    "module-executions": "mean of {n} traced executions of the main program per device, start to next start",
}


def step_basis(ctx: Context) -> str:
    """What the step time divides by, for the summary: the trace's steps as the profile marked them
    (under the profiler; verify's decode step is timed without it), or "" when the input does not say."""
    source = ctx.breakdown.step_source if ctx.breakdown is not None else ""
    words = _STEP_SOURCES.get(source)
    return words.format(n=ctx.num_steps) if words and ctx.num_steps else ""


# Parts of an HLO line that differ between recompiled copies of one program: metadata (stack frame
# ids), program ids written ``module(12)``.


# Converts and data movement: what XLA inserts by itself (layout copies, copy insertion, bf16
# normalisation around ops a backend runs in f32).
_MOVE_OR_CONVERT = frozenset({
    "copy", "convert", "bitcast-convert", "slice", "dynamic-slice", "dynamic-update-slice", "transpose",
    "reshape", "broadcast", "concatenate", "pad",
})


def compiler_inserted(ctx: Context, findings: Iterable[Finding] = ()) -> tuple[float, int]:
    """(time per step, count) of timed entry ops that XLA inserted: no metadata of their own, only
    converts and data movement inside, at least one convert or copy without metadata (layout
    copies, copy insertion, bf16 normalisation). Ops a finding already covers are left out."""
    if not ctx.has_opstats:
        return 0.0, 0
    covered = {(f.module, f.op) for f in findings}
    # A finding sized over several ops (a rebuild chain, a softmax, an invariant group) covers each.
    covered |= {(f.module, str(op)) for f in findings for k, v in f.extra
                if k == "ops" and isinstance(v, (list, tuple)) for op in v}
    total, count = 0.0, 0
    for m in ctx.modules:
        for inst in m.entry.instructions:
            if inst.op_name or inst.source or (m.name, inst.name) in covered:
                continue
            if not set(fused_opcodes(m, inst)) <= _MOVE_OR_CONVERT or not _inserted_convert_or_copy(m, inst):
                continue
            timing = ctx.op_timing(m, inst.name)
            if timing is None or not timing.time_per_step_us:
                continue
            total += timing.time_per_step_us
            count += 1
    return total, count


def _inserted_convert_or_copy(module: HloModule, inst: HloInstruction) -> bool:
    """True when ``inst`` is, or fuses, a convert or copy with no metadata (XLA's own)."""
    body = module.fusion_body(inst)
    if body is None:
        return inst.opcode in ("convert", "copy") and not inst.op_name
    return any(_inserted_convert_or_copy(module, i) for i in body.instructions)


def _category(ctx: Context, finding: Finding) -> str:
    if not finding.op or not finding.module:
        return ""
    timing = ctx.op_timing(finding.module, finding.op, finding.program_id)
    return timing.category if timing is not None else ""


_REQUIREMENT_WORDS = {"opstats": "op stats (a trace)", "hlo": "HLO modules", "source": "--source",
                      "memory": "buffer assignments (an .xplane.pb)"}
