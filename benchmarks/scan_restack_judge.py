"""Judge of HD020 (and HD021) against an interleaved A/B timing of the same program with and without the waste.

For each size: ``hlo-doctor profile FILE.py:BASE`` and ``diagnose --format json`` in subprocesses, the
rule's recoverable time per step read from the finding, as a share of the captured step; then, in this process, BASE and REMEDY
alternated (AB BA ...) after warming both, and the saving taken as the median of the paired
differences. Prints one line per size: the claimed share of the step, the measured saving as a share of the
baseline's median step, and their ratio (wall clock: read it beside the load it prints).

    PYTHONPATH=. python benchmarks/scan_restack_judge.py [--rule HD020|HD020-flax|HD021] [--rounds 40]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "HD020": (ROOT / "tests/rules/programs/scan_cache.py", "step", "step_in_place", "SCAN_CACHE_POSITIONS",
              ("256", "512", "1024"), {"SCAN_CACHE_WIDTH": "256"}),
    # flax's nn.scan (run with the field venv's python: benchmarks/field/README.md)
    "HD020-flax": (ROOT / "benchmarks/field/flax_scan_decoder.py", "step", "step_carried", "FIELD_POSITIONS",
                   ("256", "512", "1024"), {"FIELD_WIDTH": "256"}),
    "HD021": (ROOT / "tests/rules/programs/dead_output.py", "step", "step_without_logits", "DEAD_OUTPUT_VOCAB",
              ("32000", "64000", "128000"), {}),
}


def _claimed(program: Path, target: str, env: dict[str, str], code: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cli = [sys.executable, "-m", "hlo_doctor.cli"]
        subprocess.run([*cli, "profile", f"{program}:{target}", "--steps", "5", "--warmup", "2", "--out", str(run),
                        "--format", "json"], env=env, check=True, capture_output=True)
        out = subprocess.run([*cli, "diagnose", str(run), "--format", "json"], env=env, capture_output=True, text=True)
        doc = json.loads(out.stdout)
        found = [f for f in doc["findings"] if f["code"] == code.split("-")[0]]
        claimed = sum(f["recoverable_us"] or 0.0 for f in found)
        return 100 * claimed / doc["step_time_us"], len(found)


def _measured(program: Path, base: str, remedy: str, rounds: int) -> tuple[float, float]:
    spec = importlib.util.spec_from_file_location(f"judged_{time.monotonic_ns()}", program)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a_fn, b_fn = getattr(mod, base), getattr(mod, remedy)
    for f in (a_fn, b_fn, a_fn, b_fn, a_fn, b_fn):
        jax.block_until_ready(f())
    a, b = [], []
    for r in range(rounds):
        for f in ((a_fn, b_fn) if r % 2 == 0 else (b_fn, a_fn)):
            t = time.perf_counter()
            jax.block_until_ready(f())
            (a if f is a_fn else b).append((time.perf_counter() - t) * 1000)
    return statistics.median(a), statistics.median([x - y for x, y in zip(a, b, strict=True)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rule", default="HD020", choices=sorted(CASES))
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    program, base, remedy, knob, sizes, fixed = CASES[args.rule]
    print(f"load: {os.getloadavg()[0]:.1f}")
    for size in sizes:
        env = {**os.environ, **fixed, knob: size}
        os.environ.update(fixed)
        os.environ[knob] = size
        claimed, n = _claimed(program, base, env, args.rule)
        step, saved = _measured(program, base, remedy, args.rounds)
        measured = 100 * saved / step
        print(f"{args.rule} {knob}={size}: findings {n:.0f}, claimed {claimed:.1f}% of the captured step, "
              f"measured {measured:.1f}% ({saved:.2f} ms of {step:.2f} ms), ratio {claimed / measured:.2f}")


if __name__ == "__main__":
    main()
