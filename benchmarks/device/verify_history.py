"""Does what ran earlier in a process change verify's rounds there? (A TPU finding: ``doctor``'s verify,
run in the process that had just profiled the engine, measured the baseline's first 5-9 decode steps
of each round at ~3.5 ms against ~2.1 ms after them; a fresh ``verify`` saw no such phase.)

    python benchmarks/device/verify_history.py MODE OUT.json [--rounds N] [--vocab V --batch B]

MODE: ``fresh`` (verify alone), ``profile`` (the bundled engine captured first, as doctor's step 1),
``steps`` (the bundled engine warmed up and stepped first, no profiler). Writes each round's decode
step times of both sides, and the verdict, to OUT.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["fresh", "profile", "steps"])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--batch", type=int)
    a = ap.parse_args()
    from hlo_doctor.engines import load_engine
    from hlo_doctor.engines.session import capture_engine
    from hlo_doctor.verify.engine.run import run_verify
    from hlo_doctor.verify.engine.settings import VerifySettings, engine_config

    work = Path(tempfile.mkdtemp(prefix=f"history-{a.mode}-"))
    settings = VerifySettings(fix="bf16-greedy-sampler", rounds=a.rounds, vocab=a.vocab, batch=a.batch,
                              out_dir=work / "verify")
    module = load_engine(None)
    config = engine_config(module, settings)
    t0 = time.perf_counter()
    if a.mode == "profile":
        capture_engine(module, config, name="engine", out_dir=work / "profile", steps=5)
    elif a.mode == "steps":
        target = module.profile_target(config)
        target.warmup()
        for _ in range(8):
            target.step()
        del target
    before_s = time.perf_counter() - t0
    report = run_verify(settings)
    doc = json.loads(json.dumps(dataclasses.asdict(report), default=str))
    out = {"mode": a.mode, "before_s": before_s, "step_time": doc.get("step_time"),
           "rounds": {side: [r["step_times_ms"] for r in doc[side]["rounds"]] for side in ("baseline", "treatment")}}
    a.out.write_text(json.dumps(out, indent=1))
    st = out["step_time"] or {}
    print(a.mode, "ratio", st.get("ratio"), [st.get("ci_low"), st.get("ci_high")], "medians",
          st.get("baseline_median"), st.get("candidate_median"))
    for side, rounds in out["rounds"].items():
        for r in rounds:
            print(" ", side, [round(x, 2) for x in r])


if __name__ == "__main__":
    main()
