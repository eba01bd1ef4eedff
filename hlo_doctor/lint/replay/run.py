"""Measure a fix's promise by replaying the capture's own programs, with and without its change.

Only where the answer stands for the capture's: its backend is XLA:CPU, or XLA:TPU or XLA:GPU on a
machine with the capture's kind of chip (:mod:`.launch`), and it names this process's jax and jaxlib
(``whatif.refusal``: the same compiler builds the same loops). The programs are the
capture's ``HloModuleProto``\\ s, read from its xplane; :mod:`.plan` says which and how each side
changes them; :mod:`.child` compiles and times them in a process of its own, alternated.

The figure: the pairs' median saving per step here (an iteration runs each program as often as it
ran per step in the capture) and its interval (:mod:`.timing`). Where the capture's run.json names
this machine (``profile`` records it: :func:`~hlo_doctor.lint.store.capture_machine`), that saving is
the promise: the same programs on the same machine, untraced (the profiler's event per op makes small
XLA:CPU steps several times slower in the capture than without it, so the capture's time of them is
the profiler's pace, not the step a fix will shorten). Elsewhere the promise is that saving as a
fraction of side A's time here, applied to side A's programs' time in the capture's median step
(``plan.median_share``: a step a loaded machine slowed moves the mean, not the pairs' median): the
capture's pace stays the unit (its machine, the profiler's overhead), which this machine's time
cannot stand for. Findings the replay does not cover add their model at the same pace (x here /
capture where the promise is this machine's). Both figures are kept; the line says which is the
promise; the share of the step a line prints is the capture's either way.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hlo_doctor.core.format import fmt_duration
from hlo_doctor.core.model import Finding
from hlo_doctor.lint.activity import measuring
from hlo_doctor.lint.context import Context
from hlo_doctor.lint.measurement import DEFAULT_BUDGET_S, Measurement, identity_here, paired_ratio
from hlo_doctor.lint.replay.allocator import (
    FAULTS_NOTED,
    FRESH_PAGES_ENV,
    FreshPages,
    allocator_state_matters,
    faults_per_step,
)
from hlo_doctor.lint.replay.launch import backend_refusal, run_child
from hlo_doctor.lint.replay.plan import ReplayPlan, capture_protos, plan
from hlo_doctor.lint.replay.spec import ReplaySpec
from hlo_doctor.lint.replay.timing import NEGLIGIBLE, PairedTiming, look_confidence

if TYPE_CHECKING:
    from hlo_doctor.lint.store import MeasurementStore

SECONDS = 3.0
"""Time the child spends timing pairs before its first look (at least :data:`.spec.ReplaySpec.min_pairs`)."""
CAP_SECONDS = DEFAULT_BUDGET_S
"""The most time it spends timing pairs: it adds pairs until the interval decides or this is reached."""
TIMEOUT_S = 180.0
"""The child's whole run (importing jax, compiling both sides, timing) before it is stopped."""
NOT_THE_CAPTURE = 3.0
"""Side A is part of the capture's step: untraced on the capture's own machine it takes at most the
traced step's median, this many times over for a load that moved; beyond it the replay does not stand
(side A over the step: 0.54-1.04 on 12 programs; keras-hub's generate replayed with made-up inputs: 31)."""


@dataclass(frozen=True, slots=True)
class ReplayMeasurement:
    """One fix replayed: both sides here, per step (us), and the promise applied to the capture."""

    fix: str
    a_us: float
    b_us: float
    saving_us: float
    interval_us: tuple[float, float]
    pairs: int
    capture_us: float
    """Side A's programs' time in the capture's median step."""
    programs: tuple[str, ...]
    removed: tuple[str, ...]
    """What side B's compiled programs no longer run (``copy``, ``exponential``, a whole program)."""
    covered: tuple[str, ...]
    modelled: tuple[str, ...]
    """Findings the replay does not stand for (rule codes); their model figures add to the promise."""
    modelled_us: float
    jax_version: str
    when: str = ""
    """UTC time of the measurement (``2026-12-03T06:40:12Z``), stored with it."""
    cap_s: float | None = None
    """The time cap pairs were added under (None: a measurement stored before pairs were added)."""
    stopped: str = ""
    """``saving``/``slower``/``negligible`` (the interval decided) or ``cap`` (undecided at the cap)."""
    chip: str = ""
    """The accelerator the replay ran on, the capture's own kind (``TPU v5 lite``); "" on XLA:CPU."""
    same_machine: bool = False
    """The capture's run.json names this machine, or its chip is this machine's (an accelerator's
    replay): the promise is the saving here, untraced."""
    a_faults: float | None = None
    """Side A's minor page faults per step here (the median over its timings; None: a measurement
    stored before they were counted). A side that allocates a large array fresh each step pays its
    first touch in its time, and how often the allocator hands one out fresh differs by process."""
    b_faults: float | None = None
    fresh: FreshPages | None = None
    """The same replay in a child whose allocator maps every large buffer fresh (:data:`FRESH_PAGES_ENV`):
    the allocator's other state; None where it was not measured (the programs make under 1 MiB of arrays
    whose pages the state decides: :func:`allocator_state_matters`; a measurement stored before; a
    child that failed)."""

    @property
    def fraction(self) -> float:
        """The saving as a share of side A here (negative: the change is slower)."""
        return self.saving_us / self.a_us if self.a_us > 0 else math.nan

    @property
    def promise_pace(self) -> str:
        """``here, untraced`` (the capture was taken on this machine) or ``the capture's``."""
        return "here, untraced" if self.same_machine else "the capture's"

    @property
    def _modelled_here_us(self) -> float:
        """The modelled findings at the promise's pace (the capture's figure x here / capture here)."""
        if not self.same_machine:
            return self.modelled_us
        return self.modelled_us * self.a_us / self.capture_us if self.capture_us > 0 else self.modelled_us

    @property
    def capture_promise_us(self) -> float:
        """The saving applied to the capture's time of the same programs, plus modelled findings: what
        the fix is worth at the capture's pace (the share of the step a line prints)."""
        return self.fraction * self.capture_us + self.modelled_us

    @property
    def promise_us(self) -> float:
        """The promise per step: the saving here, untraced, where the capture was taken on this machine;
        else :attr:`capture_promise_us`."""
        if self.same_machine:
            return self.saving_us + self._modelled_here_us
        return self.capture_promise_us

    def _promised(self, interval: tuple[float, float], a_us: float) -> tuple[float, float]:
        """An interval of savings here (side A ``a_us`` here) at the promise's pace."""
        lo, hi = interval
        if self.same_machine:
            return (lo + self._modelled_here_us, hi + self._modelled_here_us)
        scale = self.capture_us / a_us if a_us > 0 else math.nan
        return (lo * scale + self.modelled_us, hi * scale + self.modelled_us)

    @property
    def promise_interval_us(self) -> tuple[float, float]:
        """The promise's range: this child's interval, widened to hold the fresh-pages child's where it
        ran (the allocator's two states: a user's process may be in either)."""
        lo, hi = self._promised(self.interval_us, self.a_us)
        if self.fresh is not None:
            f_lo, f_hi = self._promised(self.fresh.interval_us, self.fresh.a_us)
            lo, hi = min(lo, f_lo), max(hi, f_hi)
        return (lo, hi)

    @property
    def fresh_promise_us(self) -> float | None:
        """The fresh-pages child's saving at the promise's pace (None where it did not run)."""
        if self.fresh is None:
            return None
        if self.same_machine:
            return self.fresh.saving_us + self._modelled_here_us
        frac = self.fresh.saving_us / self.fresh.a_us if self.fresh.a_us > 0 else math.nan
        return frac * self.capture_us + self.modelled_us

    @property
    def slower(self) -> bool:
        """The change measured slower here: its whole interval below zero."""
        return self.interval_us[1] < 0

    @property
    def significant(self) -> bool:
        lo, hi = self.interval_us
        return lo > 0 or hi < 0

    @property
    def promises(self) -> bool:
        """Significant and not within the negligible band (a tiny interval can clear 0 there)."""
        return self.significant and self.stopped != "negligible"

    def line(self) -> str:
        """``measured by replaying jit_sample(7), jit_convert_element_type(3) here: ...``."""
        lo, hi = self.promise_interval_us
        head = (f"measured by replaying {', '.join(self.programs)} on this machine (jax {self.jax_version}, "
                f"{self.pairs} alternated pairs{self._stop_text()}): "
                f"{fmt_duration(self.a_us)} -> {fmt_duration(self.b_us)} per step here")
        if self.slower:
            verdict = f"the change is slower here by {fmt_duration(-self.saving_us)}: no saving promised"
        elif self.stopped == "negligible":
            verdict = f"no change here beyond {100 * NEGLIGIBLE:.0f}% of those programs"
        elif not self.significant:
            verdict = "no significant change here"
        else:
            verdict = f"saves {100.0 * self.fraction:.0f}% of those programs"
        if self.chip:
            scaled = (f"; the capture's chip ({self.chip}) is this machine's, so that is the promise, untraced "
                      f"(the capture's {fmt_duration(self.capture_us)} of them is their device ops alone, without "
                      f"the dispatch and idle between them): ~{fmt_duration(self.promise_us)} "
                      f"[{fmt_duration(lo)}, {fmt_duration(hi)}]")
        elif self.same_machine:
            scaled = (f"; the capture was taken on this machine, so that is the promise, untraced (the "
                      f"capture's {fmt_duration(self.capture_us)} of them is the profiler's pace): "
                      f"~{fmt_duration(self.promise_us)} [{fmt_duration(lo)}, {fmt_duration(hi)}]")
        else:
            scaled = (f"; at the capture's pace {fmt_duration(self.capture_us)} of them -> "
                      f"~{fmt_duration(self.promise_us)} [{fmt_duration(lo)}, {fmt_duration(hi)}]")
        model = (f"; {', '.join(self.modelled)} stay modelled (~{fmt_duration(self._modelled_here_us)})"
                 if self.modelled else "")
        return f"{head}; {verdict}{scaled}{model}{self.faults_text()}{self.fresh_text()}"

    def fresh_text(self) -> str:
        """``; with every large buffer mapped fresh (the allocator's other state): 9.7 -> 0.3 ms, saves
        ~9.4 ms (4,000 page faults a step on its written side): the range holds both`` ("" where that
        child did not run)."""
        f = self.fresh
        if f is None:
            return ""
        promised = self.fresh_promise_us or 0.0
        faults = f" ({f.a_faults:,.0f} page faults a step on its written side, {f.b_faults:,.0f} on its fixed side)" \
            if f.a_faults is not None and f.b_faults is not None else ""
        what = (f"slower by {fmt_duration(-promised)}" if f.interval_us[1] < 0 else
                f"saves ~{fmt_duration(promised)}" if f.interval_us[0] > 0 else "no significant change")
        return (f"; with every large buffer mapped fresh (the allocator's other state): "
                f"{fmt_duration(f.a_us)} -> {fmt_duration(f.b_us)} per step here, {what}{faults}; the range holds both")

    def faults_text(self) -> str:
        """``; its written side took 32,002 page faults a step here, its fixed side 0: ...`` where the
        sides' counts differ by :data:`FAULTS_NOTED` or more; "" otherwise (or not counted)."""
        if self.a_faults is None or self.b_faults is None or abs(self.a_faults - self.b_faults) < FAULTS_NOTED:
            return ""
        return (f"; its written side took {self.a_faults:,.0f} page faults a step here, its fixed side "
                f"{self.b_faults:,.0f}: memory handed out fresh each step, whose cost follows the allocator's "
                f"state (another process may take more or fewer)")

    def _stop_text(self) -> str:
        """``, decided, measured 2026-12-03`` / ``, undecided at its 10 s cap, ...``."""
        stop = ""
        if self.cap_s is not None:
            stop = f", undecided at its {self.cap_s:g} s cap" if self.stopped == "cap" else ", decided"
        return stop + (f", measured here {self.when[:10]}" if self.when else "")

    def to_dict(self) -> dict[str, object]:
        return {"fix": self.fix, "basis": "measured (replay)", "when": self.when, "cap_s": self.cap_s,
                "stopped": self.stopped, "here_a_us": self.a_us, "here_b_us": self.b_us,
                "here_saving_us": self.saving_us, "here_interval_us": list(self.interval_us), "pairs": self.pairs,
                "capture_us": self.capture_us, "fraction": self.fraction, "promise_us": self.promise_us,
                "promise_interval_us": list(self.promise_interval_us), "programs": list(self.programs),
                "removed": list(self.removed), "covered": list(self.covered), "modelled": list(self.modelled),
                "modelled_us": self.modelled_us, "jax": self.jax_version, "same_machine": self.same_machine,
                "promise_pace": self.promise_pace, "chip": self.chip, "capture_promise_us": self.capture_promise_us,
                "here_a_faults_per_step": self.a_faults, "here_b_faults_per_step": self.b_faults,
                "fresh_pages": self.fresh.to_dict(self.fresh_promise_us) if self.fresh is not None else None}


def replay_refusal(ctx: Context) -> str:
    """Why no replay runs for ``ctx`` ("" when one may): the what-if's conditions on a backend this
    machine has (:func:`.launch.backend_refusal`), and an xplane."""
    why = backend_refusal(ctx)
    if why:
        return why
    if ctx.kind not in ("run", "xplane"):
        return f"the input is {ctx.kind or 'not a capture'}, not an xplane with the programs' HLO protos"
    return ""


def measure_fix(ctx: Context, fix: str, findings: Sequence[Finding], *, seconds: float = SECONDS,
                cap_seconds: float | None = None, timeout_s: float = TIMEOUT_S) -> ReplayMeasurement | str:
    """Replay ``fix`` (its ``findings``) on this machine, or the one-line reason it cannot be;
    ``cap_seconds`` of pairs at most (default: the context's ``measure_seconds``), the first look
    after ``seconds`` or the cap, whichever is less."""
    cap_seconds = ctx.measure_seconds if cap_seconds is None else cap_seconds
    seconds = min(seconds, cap_seconds)
    why = replay_refusal(ctx)
    if why:
        return why
    # The same findings are the same change whatever the fix is called: replayed once.
    changed = tuple(sorted((f.code, f.module, f.program_id or 0, f.op) for f in findings))
    key = (ctx.origin, changed)
    if key not in _MEMO:
        store = ctx.measurements
        store_key = "replay of " + "; ".join(f"{c} {m}({p}) {o}" for c, m, p, o in changed)
        stored = store.lookup(KIND, store_key) if store is not None else None
        try:
            if stored is not None:
                _MEMO[key] = _from_stored(ctx, fix, findings, stored)
            else:
                made = _measure(ctx, fix, findings, seconds, cap_seconds, timeout_s, store_key, store)
                _MEMO[key] = made
        except Exception as exc:  # noqa: BLE001 - a replay that fails leaves the model, said in one line
            _MEMO[key] = f"the replay failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    got = _MEMO[key]
    if isinstance(got, str):
        return got
    from hlo_doctor.core.machine import machine_here
    from hlo_doctor.lint.store import capture_machine

    # An accelerator's replay ran on the capture's own kind of chip (the child compares them), whose
    # device time the profiler does not slow as it slows XLA:CPU's: its saving here is the promise.
    same = ctx.backend != "cpu" or capture_machine(Path(ctx.origin)) == machine_here()
    got = dataclasses.replace(got, fix=fix, same_machine=same, chip=ctx.device_kind if ctx.backend != "cpu" else "")
    step = statistics.median(ctx.step_times_us) if ctx.step_times_us else ctx.step_time_us or 0.0
    if same and not got.chip and step > 0 and got.a_us > NOT_THE_CAPTURE * step:
        return (f"the replay does not stand for the capture: its programs took {got.a_us / step:.1f}x the "
                f"capture's whole step on this same machine ({fmt_duration(got.a_us)} against a "
                f"{fmt_duration(step)} traced step), so XLA did not build or run them as the capture did")
    return got


KIND = "replay/fix"
"""The store's kind for a fix replayed from the capture's programs."""


def _to_stored(store_key: str, doc: dict[str, object], store: MeasurementStore | None) -> Measurement:
    """The child's timings as a stored measurement (side B over side A, paired), its compiled op counts
    kept as sides of their own (``ops a0 copy``: one value, the count), so that a later diagnosis of
    the same capture rebuilds the same figure without replaying."""
    m = paired_ratio(KIND, store_key, ("a", doc["a_us"]), ("b", doc["b_us"]),  # type: ignore[arg-type]
                     store.identity() if store is not None else identity_here(""))
    sides: dict[str, list[dict[str, int]]] = {side: list(doc[f"{side}_ops"]) for side in ("a", "b")}  # type: ignore[call-overload]
    ops: tuple[tuple[str, tuple[float, ...]], ...] = tuple(
        (f"ops {side}{i} {op}", (float(n),)) for side, tables in sides.items()
        for i, counts in enumerate(tables) for op, n in sorted(counts.items()))
    if isinstance(doc.get("looks"), int):
        ops = (*ops, ("looks", (float(doc["looks"]),)))  # type: ignore[arg-type]
    for side in ("a", "b"):
        faults = doc.get(f"{side}_faults")
        if isinstance(faults, list) and faults:
            ops = (*ops, (f"faults {side}", tuple(float(x) for x in faults)))
    fresh = doc.get("fresh")
    if isinstance(fresh, dict):
        # The fresh-pages child's timings, kept beside the first's (a later diagnosis rebuilds both).
        for name in ("a_us", "b_us", "a_faults", "b_faults"):
            values = fresh.get(name)
            if isinstance(values, list) and values:
                ops = (*ops, (f"fresh {name}", tuple(float(x) for x in values)))
        if isinstance(fresh.get("looks"), int):
            ops = (*ops, ("fresh looks", (float(fresh["looks"]),)))
    cap = doc.get("cap_s")
    return dataclasses.replace(m, samples=(*m.samples, *ops), budget_s=float(cap) if isinstance(cap, (int, float)) else None,  # noqa: E501
                               stopped=str(doc.get("stopped", "")) if isinstance(cap, (int, float)) else "")


def _from_stored(ctx: Context, fix: str, findings: Sequence[Finding], m: Measurement) -> ReplayMeasurement | str:
    p = plan(ctx, findings)
    if isinstance(p, str):
        return p
    a_ops: list[dict[str, int]] = [{} for _ in p.a]
    b_ops: list[dict[str, int]] = [{} for _ in p.b]
    for name, values in m.samples:
        if not name.startswith("ops ") or not values:
            continue
        _, where, op = name.split(" ", 2)
        side, i = where[0], int(where[1:])
        table = a_ops if side == "a" else b_ops
        if 0 <= i < len(table):
            table[i][op] = int(values[0])
    doc: dict[str, object] = {"a_us": list(m.side("a")), "b_us": list(m.side("b")), "a_ops": a_ops,
                              "b_ops": b_ops, "jax": m.identity.jax}
    if m.side("looks"):
        doc["looks"] = int(m.side("looks")[0])
    for side in ("a", "b"):
        if m.side(f"faults {side}"):
            doc[f"{side}_faults"] = list(m.side(f"faults {side}"))
    if m.side("fresh a_us") and m.side("fresh b_us"):
        fresh: dict[str, object] = {name: list(m.side(f"fresh {name}"))
                                    for name in ("a_us", "b_us", "a_faults", "b_faults") if m.side(f"fresh {name}")}
        if m.side("fresh looks"):
            fresh["looks"] = int(m.side("fresh looks")[0])
        doc["fresh"] = fresh
    return _measurement(fix, p, doc, m)


_MEMO: dict[tuple[object, ...], ReplayMeasurement | str] = {}
"""Replays done in this process (a report that diagnoses one capture for several views replays once)."""


def _measure(ctx: Context, fix: str, findings: Sequence[Finding], seconds: float, cap_seconds: float,
             timeout_s: float, store_key: str, store: MeasurementStore | None) -> ReplayMeasurement | str:
    p = plan(ctx, findings)
    if isinstance(p, str):
        return p
    protos = capture_protos(ctx, p)
    if isinstance(protos, str):
        return protos
    with tempfile.TemporaryDirectory(prefix="hlo-doctor-replay-") as tmp:
        folder = Path(tmp)
        for name, data in protos.items():
            (folder / name).write_bytes(data)
        ReplaySpec(a=p.a, b=p.b, seconds=seconds, cap_seconds=max(seconds, cap_seconds), platform=ctx.backend,
                   device_kind=ctx.device_kind).write(folder / "spec.json")
        programs = ", ".join(c.module for c in p.a)
        with measuring(f"measuring {fix}: replaying {programs} (up to {max(seconds, cap_seconds):g} s)"):
            doc = run_child(folder, timeout_s, ctx.backend)
        if doc.get("ok") and ctx.backend == "cpu" and allocator_state_matters(p):
            # The host allocator's other state, in a second child (FRESH_PAGES_ENV); its failure leaves the first.
            with measuring(f"measuring {fix}: replaying {programs}, every large buffer mapped fresh"):
                fresh = run_child(folder, timeout_s, ctx.backend, FRESH_PAGES_ENV, "fresh.json")
            if fresh.get("ok"):
                doc["fresh"] = fresh
    if not doc.get("ok"):
        return f"the replay did not run: {doc.get('reason', 'no reason given')}"
    m = _to_stored(store_key, doc, store)
    if store is not None:
        store.record(m)
    return _measurement(fix, p, doc, m)


def _measurement(fix: str, p: ReplayPlan, doc: dict[str, object], m: Measurement) -> ReplayMeasurement:
    looks = doc.get("looks")
    # The interval at the confidence its last look decided at (pairs added until it decides spend the
    # error over the looks), so that "significant" and "decided" say the same.
    confidence = look_confidence(int(looks)) if isinstance(looks, (int, float)) else 0.95
    t = PairedTiming(tuple(doc["a_us"]), tuple(doc["b_us"]), confidence)  # type: ignore[arg-type]
    a_ops: list[dict[str, int]] = doc["a_ops"]  # type: ignore[assignment]
    b_ops: list[dict[str, int]] = doc["b_ops"]  # type: ignore[assignment]
    b_keys = [c.module for c in p.b]
    removed: list[str] = [f"program {c.module}" for c in p.a if c.module not in b_keys]
    for i, call in enumerate(p.a):
        if call.module in b_keys:
            after = b_ops[b_keys.index(call.module)]
            removed += [f"{call.module} {op} x{n - after.get(op, 0)}" for op, n in sorted(a_ops[i].items())
                        if op in ("copy", "exponential", "logistic", "tanh", "log", "divide", "convert")
                        and n > after.get(op, 0)]
    modelled_us = sum(f.recoverable_us or 0.0 for f in p.modelled)
    per_step = faults_per_step(doc)
    fresh: FreshPages | None = None
    fdoc = doc.get("fresh")
    if isinstance(fdoc, dict) and fdoc.get("a_us") and fdoc.get("b_us"):
        f_looks = fdoc.get("looks")
        ft = PairedTiming(tuple(fdoc["a_us"]), tuple(fdoc["b_us"]),
                          look_confidence(int(f_looks)) if isinstance(f_looks, (int, float)) else 0.95)
        f_faults = faults_per_step(fdoc)
        fresh = FreshPages(a_us=ft.a_median_us, b_us=ft.b_median_us, saving_us=ft.saving_us,
                           interval_us=ft.interval_us, pairs=ft.pairs, a_faults=f_faults["a"], b_faults=f_faults["b"])
    return ReplayMeasurement(
        fix=fix, a_us=t.a_median_us, b_us=t.b_median_us, saving_us=t.saving_us, interval_us=t.interval_us,
        pairs=t.pairs, capture_us=p.capture_us, programs=tuple(c.module for c in p.a), removed=tuple(removed),
        covered=tuple(sorted({f.code for f in p.covered})), modelled=tuple(sorted({f.code for f in p.modelled})),
        modelled_us=modelled_us, jax_version=str(doc.get("jax", "")), when=m.when, cap_s=m.budget_s,
        stopped=m.stopped, a_faults=per_step["a"], b_faults=per_step["b"], fresh=fresh)

