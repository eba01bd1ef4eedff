"""The engine A/B's own process for a promise: the captured engine and its patched copy, verify's rounds.

``python -m hlo_doctor.verify.engine.promise_child JOB.json OUT.json``. A process of its own so that
two engines' compiled programs and their memory leave with it, and an engine that hangs is stopped
by the parent's timeout. The measuring is verify's engine A/B (:mod:`.run`): both trees loaded side
by side at the capture's configuration, each warmed on its own precompiled menu, interleaved rounds
(AB BA AB...) of one offline batch with the compiles inside each counted, pairs added until the
step-time verdict decides or the budget is spent; the greedy tokens compared round by round
(check 3). No capture and no rules: the parent holds the diagnosis. Writes ``{"ok": true,
"baseline": [[ms...] per round], ...}`` or ``{"ok": false, "reason": "..."}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hlo_doctor.verify.child import child_main
from hlo_doctor.verify.engine.variants import Variant


class WarmRounds(Variant):
    """A variant whose rounds start warm: its sampler is not restarted cold before each (that serves
    verify's TTFT check, which a promise does not make; the decode steps timed are the same), so the
    budget buys rounds, not recompiles. A menu miss still compiles in the first round, and is counted."""

    def before_round(self) -> None:
        return None


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Load both trees at the capture's configuration, measure them; the document the parent reads."""
    import jax

    from hlo_doctor.capture import keep_gpu_ops_visible
    from hlo_doctor.engines import batch_bucket, load_engine
    from hlo_doctor.engines.session import engine_config
    from hlo_doctor.verify.engine.checks import check_tokens
    from hlo_doctor.verify.engine.run import _warm_and_measure
    from hlo_doctor.verify.engine.settings import VerifySettings

    config = dict(job["config"])
    # What verify sets on every engine it measures: greedy, compiles counted (not raised), and the
    # precompile menu stopped at the batch's own bucket (a measured batch runs in that bucket only).
    config.update(do_sampling=False, check_recompilation=False)
    if isinstance(config.get("batch"), int) and config["batch"] > 0:
        config["max_num_reqs"] = batch_bucket(config["batch"])
    settings = VerifySettings(fix=str(job["fix"]), rounds=int(job["rounds"]), budget_s=float(job["budget_s"]),
                              logprobs=bool(config.get("logprobs", False)))
    keep_gpu_ops_visible()
    variants = []
    for label, tree, bundled in (("baseline", job["baseline"], bool(job["bundled"])),
                                 ("treatment", job["treatment"], False)):
        module = load_engine(None if bundled else Path(tree))
        variants.append(WarmRounds(label, str(tree), module, engine_config(module, config)))
    base, treat = variants
    rounds, _notes, _cold, stopping = _warm_and_measure(settings, base, treat, lambda stage, done, total: None)
    tokens = check_tokens(base, treat, settings.logprobs)
    if not tokens.passed:
        return {"ok": False, "reason": f"the fixed engine's tokens differ from the engine's ({tokens.figure})"}
    compiles = sum(r.compiles for side in rounds.values() for r in side)
    if compiles:
        return {"ok": False, "reason": f"{compiles} compile(s) inside the measured rounds: the fixed engine missed "
                                       "its precompiled menu"}
    return {"ok": True, "backend": jax.default_backend(),
            "baseline": [list(r.step_times_ms) for r in rounds["baseline"]],
            "treatment": [list(r.step_times_ms) for r in rounds["treatment"]],
            "looks": stopping.looks, "stopped": stopping.reason}


def main(argv: list[str]) -> int:
    return child_main(run, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
