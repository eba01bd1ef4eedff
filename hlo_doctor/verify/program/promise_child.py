"""The program A/B's own process: load the step as written and its fixed copy, time them with verify's rounds.

``python -m hlo_doctor.verify.program.promise_child JOB.json OUT.json``. A process of its own so that
the user's program (its imports, its prints, a crash) stays out of ``diagnose``'s, and a step that
hangs is stopped by the parent's timeout. The measuring is verify's: :func:`.measure.measure` (warm-up,
rounds interleaved AB BA AB..., outputs compared call by call, compiles counted), with pairs added
until :func:`.run.step_comparison` decides (a change with an interval narrow beside it, the replay's
``PRECISION``; or no change) or the budget is spent. No capture and no rules: the
parent already holds the diagnosis. Writes ``{"ok": true, "baseline": [[ms...] per round], ...}``
or ``{"ok": false, "reason": "..."}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hlo_doctor.verify.child import child_main


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Load both sides, measure them; the document the parent reads."""
    import jax

    from hlo_doctor.capture import keep_gpu_ops_visible
    from hlo_doctor.lint.replay.timing import PRECISION
    from hlo_doctor.statistics import Outcome
    from hlo_doctor.verify.program.measure import Measured, measure
    from hlo_doctor.verify.program.run import step_comparison
    from hlo_doctor.verify.program.settings import ProgramSettings
    from hlo_doctor.verify.program.target import load_side

    settings = ProgramSettings(baseline=str(job["baseline"]), fix=str(job["fix"]), rounds=int(job["rounds"]),
                               steps=int(job["steps"]), warmup=int(job["warmup"]), budget_s=float(job["budget_s"]))
    keep_gpu_ops_visible()
    base = load_side("baseline", settings.baseline)
    treat = load_side("treatment", str(job["treatment"]), shown=f"{job['original']} with {job['fix']}",
                      neighbours=Path(str(job["original"])).parent)
    def decided(m: Measured, look: int) -> bool:
        # A saving or a slowdown decides only when its interval is narrow beside it (the replay's
        # rule, ``timing.PRECISION``): stopping at the first significant look overstates the change.
        c = step_comparison(settings, m, look)
        if c.outcome in (Outcome.IMPROVED, Outcome.REGRESSED):
            return (c.ci_high - c.ci_low) / 2 <= PRECISION * abs(1.0 - c.ratio)
        return c.outcome != Outcome.INCONCLUSIVE

    measured = measure(base, treat, settings, lambda stage, done, total: None, decided)
    if measured.raised is not None:
        return {"ok": False, "reason": measured.raised.describe()}
    if measured.mismatch is not None:
        return {"ok": False, "reason": f"the fixed copy's outputs differ from the step's ({measured.mismatch.describe()})"}
    compiles = sum(len(r.compiles) for rounds in measured.rounds.values() for r in rounds)
    if compiles:
        return {"ok": False, "reason": f"{compiles} compile(s) inside the measured rounds: the step does not settle"}
    stopping = measured.stopping
    return {"ok": True, "backend": jax.default_backend(),
            "baseline": [list(r.step_times_ms) for r in measured.rounds["baseline"]],
            "treatment": [list(r.step_times_ms) for r in measured.rounds["treatment"]],
            "looks": stopping.looks if stopping is not None else 1,
            "stopped": stopping.reason if stopping is not None else "fixed"}


def main(argv: list[str]) -> int:
    return child_main(run, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
