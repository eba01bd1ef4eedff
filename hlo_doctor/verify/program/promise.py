"""Each fix's promise for a capture of ``profile FILE.py:FUNC``, measured by verify's program A/B here.

Where the capture's run.json names a ``FILE.py:FUNC`` target and this machine can run it (the
capture's jax and jaxlib, its backend, the file present and as it was captured: ``core.sources``),
each file fix a finding offers is applied to a temporary copy of the file at the lines its findings
name (:func:`.sites.sites_from_findings`, :func:`.target.make_fixed_copy`) and both are timed in a
process of their own (:mod:`.promise_child`: verify's warm-up, interleaved rounds, output check and
step-time statistic, with a short budget). The figure is kept in the capture's measurement store
(:mod:`hlo_doctor.lint.store`: keyed by the capture, this machine, jax, jaxlib and what was measured)
and reused by every later diagnosis; ``--remeasure`` measures again. Where it cannot run, one line
says why and the promise keeps the replay's or the model's figure.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import Finding
from hlo_doctor.core.sources import file_sha256, recorded
from hlo_doctor.lint.measurement import Measurement, now_utc, versions_here
from hlo_doctor.lint.program_ab import KIND, ProgramMeasurement
from hlo_doctor.lint.promise import FixPromise
from hlo_doctor.lint.store import MeasurementStore, run_folder

BUDGET_S = 10.0
"""Seconds the measured rounds may take in all (verify's ``--budget``): short, beside a diagnosis."""
ROUNDS, STEPS, WARMUP = 3, 5, 2
"""Rounds per side before the first look, calls per round, untimed calls per side."""
TIMEOUT_S = 180.0
"""The child's whole run (imports, compiles, warm-up, rounds) before it is stopped."""


def program_target(capture: Path) -> tuple[str, str, Path] | str | None:
    """(target as run.json names it, ``/abs/FILE.py:FUNC`` to run, the file) of a capture this machine
    can time; the one-line reason where it cannot; None where the capture is not of a program target."""
    folder = run_folder(capture)
    try:
        doc = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    target = doc.get("target") if isinstance(doc, dict) else None
    if not isinstance(target, str) or ":" not in target or not target.rpartition(":")[0].endswith(".py"):
        return None
    path, _, func = target.rpartition(":")
    versions = doc.get("versions") if isinstance(doc.get("versions"), dict) else {}
    want = (str(versions.get("jax", "")), str(versions.get("jaxlib", "")))
    have = versions_here()
    if want != have:
        return (f"the capture ran jax {want[0] or '?'} (jaxlib {want[1] or '?'}), this machine has jax {have[0] or '-'} "
                f"(jaxlib {have[1] or '-'})")
    record = recorded(folder)
    tail = Path(path).parts
    named = [k for k in record if Path(k).parts[-len(tail):] == tail]
    if len(named) != 1:
        return f"the capture's run.json does not fingerprint {path}, so this machine cannot tell it is unchanged"
    file = Path(named[0])
    now = file_sha256(file)
    if now is None:
        return f"{file} is gone since the capture"
    if now != record[named[0]]:
        return f"{file} changed since the capture: timing it now would not measure the captured program"
    return target, f"{file}:{func}", file


def with_program_ab(capture: Path, promises: tuple[FixPromise, ...], findings: Iterable[Finding],
                    store: MeasurementStore | None, *, budget_s: float = BUDGET_S) -> tuple[FixPromise, ...]:
    """``promises`` with each file fix measured by a program A/B here (stored, or measured and kept);
    where none can run, each says why in its line (``program_unmeasured``). A capture not of a
    ``FILE.py:FUNC`` target: ``promises`` as they are."""
    where = program_target(capture)
    if where is None or not promises:
        return promises
    if isinstance(where, str):
        return tuple(dataclasses.replace(p, program_unmeasured=where) for p in promises)
    findings = list(findings)
    out = [_one(p, findings, where, store, budget_s) for p in promises]
    return tuple(sorted(out, key=lambda p: (-p.net_us, p.fix)))


def _one(p: FixPromise, findings: Sequence[Finding], where: tuple[str, str, Path], store: MeasurementStore | None,
         budget_s: float) -> FixPromise:
    from hlo_doctor.verify.program.sites import sites_from_findings
    from hlo_doctor.verify.program.target import check_fix_target

    target, spec, file = where
    try:
        check_fix_target(spec, p.fix)
        sites = sites_from_findings([f for f in findings if f.fix == p.fix], p.fix, file)
    except InputError as exc:
        return dataclasses.replace(p, program_unmeasured=exc.what)
    lines = tuple(sorted({s.line for s in sites}))
    key = (f"program A/B of {target} with {p.fix} at lines {','.join(map(str, lines))}; {ROUNDS} rounds x {STEPS} "
           f"steps, budget {budget_s:g} s")
    stored = store.lookup(KIND, key) if store is not None else None
    if stored is None:
        made = _measure(p.fix, spec, file, sites, key, budget_s, store)
        if isinstance(made, str):
            return dataclasses.replace(p, program_unmeasured=made)
        stored = made
        if store is not None:
            store.record(made)
    got = from_measurement(p.fix, target, lines, stored)
    return dataclasses.replace(p, program=got) if isinstance(got, ProgramMeasurement) else \
        dataclasses.replace(p, program_unmeasured=got)


def _measure(fix: str, spec: str, file: Path, sites: Sequence[object], key: str, budget_s: float,
             store: MeasurementStore | None) -> Measurement | str:
    import jax

    from hlo_doctor.verify.program.target import make_fixed_copy

    with tempfile.TemporaryDirectory(prefix="hlo-doctor-program-ab-") as tmp:
        work = Path(tmp)
        try:
            fixed = make_fixed_copy(spec, fix, work, sites=sites)  # type: ignore[arg-type]
        except InputError as exc:
            return exc.what
        job = {"baseline": spec, "treatment": fixed.spec, "original": str(file), "fix": fix, "rounds": ROUNDS,
               "steps": STEPS, "warmup": WARMUP, "budget_s": budget_s}
        (work / "job.json").write_text(json.dumps(job), encoding="utf-8")
        out = work / "out.json"
        env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", jax.default_backend()))
        try:
            done = subprocess.run([sys.executable, "-m", "hlo_doctor.verify.program.promise_child", str(work / "job.json"),
                                   str(out)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S + budget_s,
                                  check=False, cwd=file.parent)
        except subprocess.TimeoutExpired:
            return f"the A/B ran past {TIMEOUT_S + budget_s:.0f} s and was stopped"
        if not out.exists():
            tail = [line for line in done.stderr.splitlines() if line.strip()]
            return f"the A/B's process stopped (exit {done.returncode}){': ' + tail[-1][:200] if tail else ''}"
        doc = json.loads(out.read_text(encoding="utf-8"))
    if not doc.get("ok"):
        return str(doc.get("reason", "no reason given"))[:300]
    return to_measurement(key, doc, budget_s, store)


def _comparison(baseline: Sequence[Sequence[float]], treatment: Sequence[Sequence[float]], looks: int) -> object:
    from hlo_doctor.verify.program.settings import ProgramSettings
    from hlo_doctor.verify.stats import alpha_at_look, compare_rounds

    settings = ProgramSettings(baseline="x.py:f", fix="x")
    return compare_rounds(settings, baseline, treatment, alpha=alpha_at_look(settings.alpha, max(1, looks)))


def to_measurement(key: str, doc: dict[str, object], budget_s: float, store: MeasurementStore | None) -> Measurement | str:
    """The child's rounds as a stored measurement: the ratio of medians and its interval, each side's
    step times in us (round after round), the looks and why it stopped."""
    base = [[1e3 * t for t in r] for r in doc["baseline"]]  # type: ignore[attr-defined]
    treat = [[1e3 * t for t in r] for r in doc["treatment"]]  # type: ignore[attr-defined]
    looks = int(doc.get("looks", 1))  # type: ignore[call-overload]
    c = _comparison(base, treat, looks)
    lo, hi = c.ci_low, c.ci_high  # type: ignore[attr-defined]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "the rounds were too few to test the difference"
    ratio = c.ratio  # type: ignore[attr-defined]
    return Measurement(kind=KIND, key=key, samples=(("baseline", tuple(t for r in base for t in r)),
                                                    ("treatment", tuple(t for r in treat for t in r)),
                                                    ("looks", (float(looks),))),
                       median=ratio, low=min(lo, ratio), high=max(hi, ratio), level=1.0 - c.alpha,  # type: ignore[attr-defined]
                       reps=len(base), when=now_utc(), identity=(store or MeasurementStore(None)).identity(), unit="ratio",
                       budget_s=budget_s, stopped=str(doc.get("stopped", "")))


def from_measurement(fix: str, target: str, lines: tuple[int, ...], m: Measurement) -> ProgramMeasurement | str:
    """A stored program A/B back as the figure every view prints (the same samples, the same figure)."""
    base, treat = m.side("baseline"), m.side("treatment")
    rounds = m.reps
    if not rounds or len(base) % rounds or len(treat) != len(base):
        return "the stored program A/B is not whole rounds; --remeasure measures it again"
    steps = len(base) // rounds
    looks = int(m.side("looks")[0]) if m.side("looks") else 1
    c = _comparison([base[i:i + steps] for i in range(0, len(base), steps)],
                    [treat[i:i + steps] for i in range(0, len(treat), steps)], looks)
    return ProgramMeasurement(
        fix=fix, target=target, a_us=c.baseline_median, b_us=c.candidate_median,  # type: ignore[attr-defined]
        ratio=m.median, ratio_interval=(m.low, m.high), level=m.level, outcome=str(c.outcome),  # type: ignore[attr-defined]
        rounds=rounds, steps=steps, budget_s=m.budget_s or 0.0, stopped=m.stopped, when=m.when, lines=lines)
