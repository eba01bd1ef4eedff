"""What each fix promises: the time its findings recover, less what a what-if run says it costs here.

A finding's recoverable time is never negative: it is waste a fix removes. A fix can also cost time
on a given machine (a narrower argmax that XLA:CPU of one jaxlib runs slower: ``lint.whatif``); the
rule that measured it says so in the finding's ``extra["fix_cost_us"]`` (per step). A fix's promise
is its findings' recoverable time (each op once, as the summary counts it) less those costs: what
``verify`` of that fix should measure.

A figure measured here carries its interval (``extra`` ``measured_net_us``: the range of what the
finding's fix gives back, negative where it costs), so the promise does too: ``net_low_us`` ..
``net_high_us``. Where this machine can run the capture's programs, a replay measures the fix whole
(``replay``: :mod:`hlo_doctor.lint.replay`) and its figure is the promise; otherwise the promise is a
model, said so, with its range. A fix is promised as a saving only when the whole range is above 0; a range that
straddles 0 "may cost", one at or below 0 has "no saving expected here", and no view prints a net
saving for either. Each measured figure's label (when, how many runs, the interval) goes with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hlo_doctor.core.format import fmt_duration
from hlo_doctor.core.model import Finding
from hlo_doctor.lint.activity import measuring
from hlo_doctor.lint.program_ab import (
    BUDGET_S,
    KIND,
    ROUNDS,
    STEPS,
    Measure,
    ProgramMeasurement,
    from_measurement,
    program_target,
)

if TYPE_CHECKING:
    from hlo_doctor.lint.replay import ReplayMeasurement
    from hlo_doctor.lint.store import MeasurementStore


REPLAY_STANDS = "the A/B did not decide, and the replay's figure, inside its interval, stands: "
"""What a promise's line says before the replay's where an undecided A/B leaves the replay's figure."""


@dataclass(frozen=True, slots=True)
class FixPromise:
    """One fix's findings, the time they recover and what the fix costs here, per step (us)."""

    fix: str
    findings: int
    recoverable_us: float
    cost_us: float
    net_low_us: float | None = None
    """The lowest net the measurements' intervals allow (None: nothing in it was measured here)."""
    net_high_us: float | None = None
    measured: tuple[str, ...] = ()
    """The label of each figure measured here (``measured here 2026-12-01, 7 runs each, x1.61 [1.55, 1.68]``)."""
    ops_us: float = 0.0
    """The findings' ops' own time per step (each op once): the model's low end (less the cost)."""
    replay: ReplayMeasurement | None = None
    """The fix replayed on this machine (:mod:`hlo_doctor.lint.replay`): then the promise is measured."""
    unmeasured: str = ""
    """Why no replay measured it (one line), where one was asked for."""
    program: ProgramMeasurement | None = None
    """The fix timed on the capture's own program (``profile FILE.py:FUNC``) with and without it: then
    that is the promise (:mod:`hlo_doctor.lint.program_ab`), before the replay's."""
    program_unmeasured: str = ""
    """Why no program A/B measured it (one line), where the capture is of a program target."""
    label: str = ""
    """What the line calls it where it is not a bundled fix: a finding whose waste a replay removed
    with no fix offered for it (``HD011 at keras_hub/src/samplers/sampler.py:139, removed``)."""

    @property
    def name(self) -> str:
        """``fix bf16-greedy-sampler``, or :attr:`label`."""
        return self.label or f"fix {self.fix}"

    @property
    def replay_stands(self) -> bool:
        """The program A/B did not decide (its interval holds 0, and it did not measure the fix slower)
        while the replay decided a saving that lies inside the A/B's interval: the two agree, and the
        replay's figure is the promise. Two diagnoses of one capture, one whose short A/B decided and
        one whose did not, then promise about the same, not "no saving" and a saving."""
        p, r = self.program, self.replay
        if p is None or r is None or p.significant or not r.promises or r.slower:
            return False
        low, high = p.interval_us
        return low <= r.promise_us <= high

    @property
    def basis(self) -> str:
        """``measured`` (a program A/B or a replay of the capture's programs here) or ``model``."""
        return "measured" if self.replay is not None or self.program is not None else "model"

    @property
    def how(self) -> str:
        """``program A/B``, ``replay``, ``what-if`` (a model with figures measured here) or ``model``."""
        if self.program is not None and not self.replay_stands:
            return "program A/B"
        if self.replay is not None:
            return "replay"
        return "what-if" if self.measured else "model"

    @property
    def model_us(self) -> float:
        """What the model says: recovered less cost."""
        return self.recoverable_us - self.cost_us

    @property
    def model_range_us(self) -> tuple[float, float]:
        """The model's range: its ops' own time only, up to all it counts (idle and host time too)."""
        low = min(self.ops_us, self.recoverable_us) - self.cost_us
        return (min(low, self.model_us), self.model_us)

    @property
    def net_us(self) -> float:
        """The promise per step: the replay's where one measured it (0 where it measured no significant
        change), else recovered less cost; negative where the fix makes the step slower here."""
        if self.program is not None and not self.replay_stands:
            return self.program.saving_us if self.program.significant else 0.0
        if self.replay is None:
            return self.model_us
        # A change the replay could not tell from no change promises nothing (its figure and interval
        # stay in ``replay``); one measured slower is a loss, never a saving.
        return self.replay.promise_us if self.replay.promises else 0.0

    @property
    def interval_us(self) -> tuple[float, float] | None:
        """The range of the promise per step, from the figure :attr:`net_us` comes from: the program
        A/B's interval, else the replay's, else the what-if's range; None for a model with nothing
        measured here (its range is :attr:`model_range_us`)."""
        if self.program is not None and not self.replay_stands:
            return self.program.interval_us
        if self.replay is not None:
            return self.replay.promise_interval_us
        if self.net_low_us is None or self.net_high_us is None:
            return None
        return (min(self.net_low_us, self.net_us), max(self.net_high_us, self.net_us))

    @property
    def verdict(self) -> str:
        """``saving`` (the whole range above 0), ``may cost`` (it straddles 0) or ``no saving expected``."""
        if self.program is not None or self.replay is not None:
            if self.how == "replay" and self.replay is not None and self.replay.stopped == "negligible":
                return "no saving expected"  # a change within the negligible band: none worth promising
            low, high = self.interval_us  # type: ignore[misc]
            return "saving" if low > 0 else "may cost" if high > 0 else "no saving expected"
        low, high = self.interval_us or (self.net_us, self.net_us)
        if low > 0:
            return "saving"
        return "may cost" if high > 0 else "no saving expected"

    def to_dict(self) -> dict[str, object]:
        return {"fix": self.fix, "findings": self.findings, "recoverable_us": self.recoverable_us,
                "cost_us": self.cost_us, "net_us": self.net_us, "net_low_us": self.net_low_us,
                "net_high_us": self.net_high_us, "verdict": self.verdict, "measured": list(self.measured),
                "basis": self.basis, "model_us": self.model_us, "model_range_us": list(self.model_range_us),
                "replay": self.replay.to_dict() if self.replay is not None else None, "unmeasured": self.unmeasured,
                "how": self.how, "program_ab": self.program.to_dict() if self.program is not None else None,
                "program_unmeasured": self.program_unmeasured, **({"label": self.label} if self.label else {})}

    def range_text(self) -> str:
        """`` [12.1, 19.8 ms]`` where something was measured here, else ""."""
        if self.net_low_us is None or self.net_high_us is None:
            return ""
        return f" [{_signed(self.net_low_us)}, {_signed(self.net_high_us)}]"

    def line(self, step_us: float | None) -> str:
        """:meth:`body`, and where a program A/B could not run, why (the figure is then the replay's or
        the model's, as the line says)."""
        body = self.body(step_us)
        return f"{body}; no program A/B: {self.program_unmeasured}" if self.program_unmeasured else body

    def body(self, step_us: float | None) -> str:
        """``fix bf16-greedy-sampler: ~38.3 ms recovered by 3 findings, less ~22.3 ms it costs on this
        machine (measured here 2026-12-01, 7 runs each, x1.61 [1.55, 1.68]): net ~16.0 ms per step
        [12.1, 19.8 ms] (~14% of the step)``; "no saving expected here" or "may cost here" instead of a
        net saving where the range does not lie above 0. Measured by a replay: its line instead; a
        model where a replay was asked for and could not run: the reason and the model's range too."""
        if self.replay_stands:
            # The A/B's line first (what it measured, undecided), then the replay whose figure it is.
            assert self.program is not None and self.replay is not None
            pct = f" (~{100.0 * self.replay.capture_promise_us / step_us:.0f}% of the step)" if step_us else ""
            return (f"{self.name}: ~{fmt_duration(self.net_us)} per step{pct}, {self.program.line()}; "
                    f"{REPLAY_STANDS}{self.replay.line()}")
        if self.program is not None:
            pct = f" (~{100.0 * self.net_us / step_us:.0f}% of the profiled step)" if step_us else ""
            if self.program.slower:
                what = f"no saving promised, ~{fmt_duration(-self.program.saving_us)} per step slower"
            elif not self.program.significant:
                what = "no saving promised, none significant"
            else:
                what = f"~{fmt_duration(self.net_us)} per step{pct}"
            return f"{self.name}: {what}, {self.program.line()}"
        if self.replay is not None:
            return self._replay_body(step_us)
        model = ""
        if self.unmeasured:
            lo, hi = self.model_range_us
            model = f"; a model (not measured: {self.unmeasured}), range {_signed(lo)} to {_signed(hi)}"
        return self._line(step_us) + model

    def _replay_body(self, step_us: float | None) -> str:
        """The line of a promise the replay measured."""
        assert self.replay is not None
        # The share of the capture's step: the saving at the capture's pace (the same as the promise,
        # unless the promise is this machine's untraced one).
        share = self.replay.capture_promise_us if self.replay.promises else 0.0
        pct = f" (~{100.0 * share / step_us:.0f}% of the step)" if step_us else ""
        if self.replay.slower:
            what = f"no saving promised, ~{fmt_duration(-self.net_us)} per step slower"
        elif self.replay.stopped == "negligible":
            what = "no saving promised, no change worth one"
        elif self.replay.stopped == "cap":
            what = "no saving promised, undecided"
        elif not self.replay.significant:
            what = "no saving promised, none significant"
        else:
            what = f"~{fmt_duration(self.net_us)} per step{pct}"
        return f"{self.name}: {what}, {self.replay.line()}"

    def _line(self, step_us: float | None) -> str:
        how = "; ".join(self.measured) or ("what-if run" if self.cost_us > 0 or not self.unmeasured else "")
        head = (f"{self.name}: ~{fmt_duration(self.recoverable_us)} recovered by {self.findings} "
                f"finding{'s' if self.findings != 1 else ''}")
        head += (f", less ~{fmt_duration(self.cost_us)} it costs on this machine ({how})" if self.cost_us > 0
                 else f" ({how})" if how else "")
        verdict = self.verdict
        if verdict == "saving":
            pct = f" (~{100.0 * self.net_us / step_us:.0f}% of the step)" if step_us else ""
            return f"{head}: net ~{fmt_duration(self.net_us)} per step{self.range_text()}{pct}"
        if verdict == "may cost":
            return (f"{head}: may cost here, no saving promised: net {_signed(self.net_us)} per step, "
                    f"anywhere in{self.range_text() or ' its range'}")
        return f"{head}: no saving expected here: net loss ~{fmt_duration(abs(self.net_us))} per step{self.range_text()}"


def _signed(us: float) -> str:
    return ("-" if us < 0 else "+") + fmt_duration(abs(us))


def fix_cost(findings: Iterable[Finding]) -> float:
    """Per step: the time the findings' fix costs here (each op once, its largest figure)."""
    best: dict[tuple[str, int | None, str], float] = {}
    for f in findings:
        cost = dict(f.extra).get("fix_cost_us")
        if isinstance(cost, (int, float)) and cost > 0:
            key = (f.module, f.program_id, f.op) if f.op else (f.code, None, f.message)
            best[key] = max(best.get(key, 0.0), float(cost))
    return sum(best.values())


def fix_promises(findings: Iterable[Finding]) -> tuple[FixPromise, ...]:
    """One promise per fix offered by the findings, the largest net first."""
    findings = list(findings)
    by_fix: dict[str, list[Finding]] = {}
    for f in findings:
        if f.fix:
            by_fix.setdefault(f.fix, []).append(f)
    everyone = [f for fs in by_fix.values() for f in fs] + [f for f in findings if not f.fix]
    out = []
    for fix, fs in by_fix.items():
        fs = fs + _follows(fs, everyone)
        recovered, cost = total_recoverable(fs), fix_cost(fs)
        spread = measured_spread(fs)
        low, high = (None, None) if spread is None else (recovered - cost + spread[0], recovered - cost + spread[1])
        labels = tuple(dict.fromkeys(str(v) for f in fs for k, v in f.extra if k == "measured"))
        out.append(FixPromise(fix, len(fs), recovered, cost, low, high, labels, ops_us=_ops_us(fs)))
    return tuple(sorted(out, key=lambda p: (-p.net_us, p.fix)))


def _follows(group: list[Finding], everyone: Iterable[Finding]) -> list[Finding]:
    """Findings outside ``group`` whose time changes with what the group's fix removes: a reduction
    reading the widened value a removed convert made (``extra`` ``widened_by``: its module and op) then
    reads the narrow one, so what the what-if measured of that read (a saving or a cost) is the fix's."""
    removed = {(f.module, f.op) for f in group if f.op}
    return [f for f in everyone if f not in group and
            tuple(dict(f.extra).get("widened_by") or ()) in removed]


def with_fixes(promises: tuple[FixPromise, ...], findings: Iterable[Finding]) -> tuple[FixPromise, ...]:
    """``promises`` and, for each fix that only ``findings`` (their fixes as they apply to the code
    at hand) offer, its promise from them; a fix already promised keeps its promise (a tree fix
    counts every finding of its rules, a copy with no line of its own included)."""
    known = {p.fix for p in promises}
    extra = tuple(p for p in fix_promises(findings) if p.fix not in known)
    return tuple(sorted((*promises, *extra), key=lambda p: (-p.net_us, p.fix)))


def measured_spread(findings: Iterable[Finding]) -> tuple[float, float] | None:
    """How far below and above its point figure the findings' measured ranges reach, per step (each op
    once): (<= 0, >= 0), or None when no finding was measured here."""
    spread: dict[tuple[str, int | None, str], tuple[float, float]] = {}
    for f in findings:
        extra = dict(f.extra)
        rng = extra.get("measured_net_us")
        if not isinstance(rng, (list, tuple)) or len(rng) != 2:
            continue
        cost = extra.get("fix_cost_us")
        point = (f.recoverable_us or 0.0) - (float(cost) if isinstance(cost, (int, float)) else 0.0)
        lo, hi = sorted(float(x) for x in rng)
        key = (f.module, f.program_id, f.op) if f.op else (f.code, None, f.message)
        spread[key] = (min(0.0, lo - point), max(0.0, hi - point))
    if not spread:
        return None
    return sum(s[0] for s in spread.values()), sum(s[1] for s in spread.values())


def total_recoverable(findings: Iterable[Finding]) -> float:
    """Sum of recoverable time, counting each (module, program id, op) once with its largest estimate.

    Host time has one owner: a finding that leaves out host time another rule counts says so in
    ``extra["held_by"]`` ((code, module, us) per step: HD015 leaves an eager call's Python to HD003);
    that time is added back when no finding of that code on that module is in ``findings`` (the owner
    was not selected or did not fire), so it is counted exactly once either way.
    """
    findings = list(findings)
    best: dict[tuple[str, int | None, str], float] = {}
    for f in findings:
        if f.recoverable_us is None:
            continue
        key = (f.module, f.program_id, f.op) if f.op else (f.code, None, f.message)
        best[key] = max(best.get(key, 0.0), f.recoverable_us)
    owners = {(f.code, f.module) for f in findings}
    orphaned = sum(float(us) for f in findings for k, v in f.extra if k == "held_by"
                   for code, module, us in v if (code, module) not in owners)
    return sum(best.values()) + orphaned


def _ops_us(findings: Iterable[Finding]) -> float:
    """Per step: the findings' ops' own time (each op once), no more than each recovers."""
    best: dict[tuple[str, int | None, str], float] = {}
    for f in findings:
        if f.recoverable_us is None or f.time_per_step_us is None:
            continue
        key = (f.module, f.program_id, f.op) if f.op else (f.code, None, f.message)
        best[key] = max(best.get(key, 0.0), min(f.time_per_step_us, f.recoverable_us))
    return sum(best.values())


def with_replays(promises: Iterable[FixPromise], findings: Iterable[Finding], measure: object) -> tuple[FixPromise, ...]:
    """``promises`` with each fix measured by ``measure(fix, its findings)`` (a
    :class:`~hlo_doctor.lint.replay.ReplayMeasurement`, or the line saying why not), largest first."""
    from dataclasses import replace
    findings = list(findings)
    out = []
    for p in promises:
        got = measure(p.fix, [f for f in findings if f.fix == p.fix])  # type: ignore[operator]
        out.append(replace(p, unmeasured=got) if isinstance(got, str) else replace(p, replay=got))
    return tuple(sorted(out, key=lambda p: (-p.net_us, p.fix)))


def with_program_ab(capture: Path, promises: tuple[FixPromise, ...], findings: Iterable[Finding],
                    store: MeasurementStore | None, measure: Measure, *,
                    budget_s: float = BUDGET_S) -> tuple[FixPromise, ...]:
    """``promises`` with each fix measured by a program A/B here: read from ``store``, else measured by
    ``measure`` and kept there; where none can run, each says why (``program_unmeasured``). A capture not of a
    ``FILE.py:FUNC`` target: ``promises`` as they are."""
    where = program_target(capture) if promises else None
    if where is None:
        return promises
    if isinstance(where, str):
        return tuple(replace(p, program_unmeasured=where) for p in promises)
    target, spec, file = where
    findings = list(findings)
    out = []
    for p in promises:
        mine = [f for f in findings if f.fix == p.fix]
        # The lines the fix applies at, as diagnose placed it (``fix_site``): what the key names.
        lines = tuple(sorted({int(str(v).rpartition(":")[2]) for f in mine for k, v in f.extra
                              if k == "fix_site" and _same(str(v).rpartition(":")[0], file)}))
        if not lines:
            out.append(replace(p, program_unmeasured=f"no finding of {p.fix} names a line of {file}"))
            continue
        key = (f"program A/B of {target} with {p.fix} at lines {','.join(map(str, lines))}; {ROUNDS} rounds x "
               f"{STEPS} steps, budget {budget_s:g} s")
        stored = store.lookup(KIND, key) if store is not None else None
        if stored is None:
            with measuring(f"measuring {p.fix}: a program A/B of {target} ({budget_s:g} s budget)"):
                made = measure(p.fix, spec, file, mine, key, budget_s)
            if isinstance(made, str):
                out.append(replace(p, program_unmeasured=made))
                continue
            stored = made
            if store is not None:
                store.record(made)
        got = from_measurement(p.fix, target, lines, stored)
        out.append(replace(p, program=got) if isinstance(got, ProgramMeasurement)
                   else replace(p, program_unmeasured=got))
    return tuple(sorted(out, key=lambda p: (-p.net_us, p.fix)))


def _same(path: str, file: Path) -> bool:
    try:
        return Path(path).resolve() == file.resolve()
    except (OSError, RuntimeError):
        return False
