"""Each fix's promise for a capture of ``profile FILE.py:FUNC``, measured by verify's program A/B here.

Where the capture's run.json names a ``FILE.py:FUNC`` target and this machine can run it (the
capture's jax and jaxlib, its backend, the file present and as it was captured: ``core.sources``),
each file fix a finding offers is applied to a temporary copy of the file at the lines its findings
name (:func:`.sites.sites_from_findings`, :func:`.target.make_fixed_copy`; the lines as ``diagnose`` placed the fix) and both are timed in a
process of their own (:mod:`.promise_child`: verify's warm-up, interleaved rounds, output check and
step-time statistic, with a short budget). The figure is kept in the capture's measurement store
(:mod:`hlo_doctor.lint.store`: keyed by the capture, this machine, jax, jaxlib and what was measured)
and reused by every later diagnosis; ``--remeasure`` measures again. Where it cannot run, one line
says why and the promise keeps the replay's or the model's figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import Finding
from hlo_doctor.lint import program_ab, promise
from hlo_doctor.lint.measurement import Measurement
from hlo_doctor.lint.program_ab import KIND, ROUNDS, STEPS, WARMUP
from hlo_doctor.lint.promise import FixPromise
from hlo_doctor.lint.store import MeasurementStore
from hlo_doctor.verify.stats import rounds_measurement

TIMEOUT_S = 180.0
"""The child's whole run (imports, compiles, warm-up, rounds) before it is stopped."""


def with_program_ab(capture: Path, promises: tuple[FixPromise, ...], findings: Iterable[Finding],
                    store: MeasurementStore | None, *, budget_s: float = program_ab.BUDGET_S) -> tuple[FixPromise, ...]:
    """:func:`hlo_doctor.lint.promise.with_program_ab` measuring with :func:`measure` (what the
    benchmarks call; ``diagnose`` passes :func:`measure` itself, imported only when it measures)."""

    def measured(fix: str, spec: str, file: Path, mine: Sequence[Finding], key: str, budget: float) -> Measurement | str:
        return measure(fix, spec, file, mine, key, budget, store)

    return promise.with_program_ab(capture, promises, findings, store, measured, budget_s=budget_s)


def measure(fix: str, spec: str, file: Path, findings: Sequence[Finding], key: str, budget_s: float,
            store: MeasurementStore | None) -> Measurement | str:
    """Apply ``fix`` to a copy of ``file`` at the lines ``findings`` name and time both in a child:
    the stored figure (``key``, this capture's identity from ``store``), or the one-line reason."""
    from hlo_doctor.verify.program.sites import sites_from_findings
    from hlo_doctor.verify.program.target import check_fix_target, make_fixed_copy

    with tempfile.TemporaryDirectory(prefix="hlo-doctor-program-ab-") as tmp:
        work = Path(tmp)
        try:
            check_fix_target(spec, fix)
            sites = sites_from_findings(findings, fix, file)
            fixed = make_fixed_copy(spec, fix, work, sites=sites)
        except InputError as exc:
            return exc.what
        job = {"baseline": spec, "treatment": fixed.spec, "original": str(file), "fix": fix, "rounds": ROUNDS,
               "steps": STEPS, "warmup": WARMUP, "budget_s": budget_s}
        (work / "job.json").write_text(json.dumps(job), encoding="utf-8")
        out = work / "out.json"
        # The child picks this machine's default backend itself: asking jax here which one that is
        # would start it in this process, and a TPU admits one process (libtpu's lock: the child
        # then fails to start it), a GPU's memory would be taken twice.
        env = dict(os.environ)
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
    return rounds_measurement(KIND, key, doc, budget_s, store)
