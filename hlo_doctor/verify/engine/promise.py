"""Each fix's promise for a capture of the engine, measured by verify's engine A/B here.

Where the capture's run.json names the bundled engine (or an engine tree) and this machine can run
it again (:func:`hlo_doctor.lint.engine_ab.engine_target`: the capture's jax and jaxlib, the engine's
files as they were captured), each project fix a finding offers is applied to a temporary copy of
the tree (:func:`.variants.make_treatment`, the ``full`` variant ``verify --fix`` applies) and both
trees are timed at the capture's configuration in a process of their own (:mod:`.promise_child`:
verify's warm-up, interleaved rounds, token check and step-time statistic, with a short budget). The
figure is kept in the capture's measurement store (:mod:`hlo_doctor.lint.store`) and reused by every
later diagnosis; ``--remeasure`` measures again. Where it cannot run, one line says why and the
promise keeps the replay's or the model's figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hlo_doctor.core.errors import HloDoctorError
from hlo_doctor.lint.engine_ab import KIND, ROUNDS, EngineTarget
from hlo_doctor.lint.measurement import Measurement
from hlo_doctor.lint.store import MeasurementStore
from hlo_doctor.verify.stats import rounds_measurement

TIMEOUT_S = 240.0
"""The child's whole run (imports, two warm-ups, rounds) before it is stopped, beyond the budget."""


def measure(fix: str, where: EngineTarget, key: str, budget_s: float, store: MeasurementStore | None) -> Measurement | str:
    """Apply ``fix`` to a copy of the engine's tree and time both in a child: the stored figure
    (``key``, this capture's identity from ``store``), or the one-line reason."""
    from hlo_doctor.fixes import fix_applies
    from hlo_doctor.verify.engine.variants import make_treatment

    if not fix_applies(fix, where.source):
        return f"{fix} does not apply to the engine's tree {where.source}"
    with tempfile.TemporaryDirectory(prefix="hlo-doctor-engine-ab-") as tmp:
        work = Path(tmp)
        try:
            fixed, _diff = make_treatment(fix, "full", where.source, work)
        except HloDoctorError as exc:
            return exc.what
        job = {"baseline": str(where.source), "bundled": where.bundled, "treatment": str(fixed), "fix": fix,
               "config": where.config, "rounds": ROUNDS, "budget_s": budget_s}
        (work / "job.json").write_text(json.dumps(job), encoding="utf-8")
        out = work / "out.json"
        env = dict(os.environ)
        if where.backend and "JAX_PLATFORMS" not in env:
            env["JAX_PLATFORMS"] = where.backend
        try:
            done = subprocess.run([sys.executable, "-m", "hlo_doctor.verify.engine.promise_child", str(work / "job.json"),
                                   str(out)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S + budget_s,
                                  check=False, cwd=work)
        except subprocess.TimeoutExpired:
            return f"the engine A/B ran past {TIMEOUT_S + budget_s:.0f} s and was stopped"
        if not out.exists():
            tail = [line for line in done.stderr.splitlines() if line.strip()]
            return f"the engine A/B's process stopped (exit {done.returncode}){': ' + tail[-1][:200] if tail else ''}"
        doc = json.loads(out.read_text(encoding="utf-8"))
    if not doc.get("ok"):
        return str(doc.get("reason", "no reason given"))[:300]
    return rounds_measurement(KIND, key, doc, budget_s, store)
