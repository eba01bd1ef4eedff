"""The engine's promise against two judges, at a few engine sizes.

For each size: ``hlo-doctor profile`` of the bundled engine, ``diagnose`` of that capture twice (the
first run measures the fix's engine A/B, the second reuses it: both timed, their JSON compared),
then the judges of the same change at the same sizes:

- ``hlo-doctor verify --fix bf16-greedy-sampler`` (the full engine A/B: cold rounds, many of them);
- a direct interleaved A/B in this process: the bundled engine and a patched copy of its tree, each
  warmed, ``--pairs`` pairs of offline batches alternated AB BA..., each batch's median decode step;
  the ratio of the two sides' medians and an order-statistic interval of the per-pair ratios.

    python benchmarks/engine_promise.py --sizes 8x32000,32x128000,64x256000 --out runs/engine-promise

Prints one line per size and writes ``OUT/engine_promise.json``. Give ``uptime``'s load beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIX = "bf16-greedy-sampler"


def cli(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hlo_doctor.cli", *args], capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done


def promise_of(doc: dict) -> dict:
    return next(p for p in doc["fixes"] if p["fix"] == FIX)


def direct_ab(batch: int, vocab: int, pairs: int) -> dict:
    """Both trees in this process, warm, alternated; each batch's median decode step (ms)."""
    import numpy as np

    from hlo_doctor.engines import load_engine
    from hlo_doctor.engines.session import engine_config
    from hlo_doctor.fixes import patched_copy
    from hlo_doctor.verify.engine.variants import shipped_engine_dir

    wanted = {"batch": batch, "vocab_size": vocab, "do_sampling": False, "check_recompilation": False,
              "max_num_reqs": max(8, 1 << (batch - 1).bit_length())}
    with tempfile.TemporaryDirectory() as tmp:
        fixed = patched_copy(FIX, shipped_engine_dir(), Path(tmp) / "fixed")
        engines = {}
        for name, module in (("a", load_engine(None)), ("b", load_engine(fixed))):
            eng = module.OfflineEngine(engine_config(module, wanted))
            eng.warmup()
            engines[name] = eng
        steps: dict[str, list[float]] = {"a": [], "b": []}
        tokens: dict[str, list] = {"a": [], "b": []}
        for i in range(pairs):
            for name in (("a", "b") if i % 2 == 0 else ("b", "a")):
                out = engines[name].run_batch()
                steps[name].append(statistics.median(out.step_times_ms))
                tokens[name].append(np.asarray(out.tokens))
    same = all(np.array_equal(x, y) for x, y in zip(tokens["a"], tokens["b"], strict=True))
    ratios = sorted(b / a for a, b in zip(steps["a"], steps["b"], strict=True))
    n = len(ratios)
    k = max(1, int(n / 2 - 1.96 * math.sqrt(n) / 2))  # order statistics around the median, ~95%
    a_ms, b_ms = statistics.median(steps["a"]), statistics.median(steps["b"])
    return {"a_ms": a_ms, "b_ms": b_ms, "ratio": b_ms / a_ms, "pair_ratio": statistics.median(ratios),
            "interval": [ratios[k - 1], ratios[n - k]], "pairs": n, "tokens_identical": same,
            "saving_ms": a_ms - b_ms}


def one_size(batch: int, vocab: int, out: Path, rounds: int, pairs: int) -> dict:
    run = out / f"b{batch}_v{vocab}"
    if not (run / "run.json").exists():
        _, done = cli("profile", "--batch", str(batch), "--vocab", str(vocab), "--steps", "3", "--warmup", "1",
                      "--out", str(run), "--top", "1")
        if done.returncode:
            raise SystemExit(done.stderr[-2000:])
    store = run / ".hlo-doctor-measurements.json"
    if store.exists():
        store.unlink()
    load = [os.getloadavg()[0]]
    first_s, first = cli("diagnose", str(run), "--format", "json", "-o", str(out / f"{run.name}.1.json"))
    second_s, second = cli("diagnose", str(run), "--format", "json", "-o", str(out / f"{run.name}.2.json"))
    same = (out / f"{run.name}.1.json").read_bytes() == (out / f"{run.name}.2.json").read_bytes()
    promise = promise_of(json.loads((out / f"{run.name}.1.json").read_text()))
    load.append(os.getloadavg()[0])
    _, v = cli("verify", "--fix", FIX, "--batch", str(batch), "--vocab", str(vocab), "--rounds", str(rounds),
               "--format", "json", "-o", str(out / f"{run.name}.verify.json"), "--out", str(out / f"{run.name}.verify"))
    verify = json.loads((out / f"{run.name}.verify.json").read_text())["step_time"] if v.returncode in (0, 1) else {}
    load.append(os.getloadavg()[0])
    direct = direct_ab(batch, vocab, pairs)
    load.append(os.getloadavg()[0])
    return {"batch": batch, "vocab": vocab, "diagnose_first_s": first_s, "diagnose_reused_s": second_s,
            "json_identical": same, "promise": {k: promise.get(k) for k in ("how", "net_us", "verdict", "program_ab",
                                                                            "program_unmeasured")},
            "verify": {k: verify.get(k) for k in ("outcome", "ratio", "ci_low", "ci_high", "baseline_median",
                                                  "candidate_median", "blocks")},
            "direct": direct, "load": load, "exit": [first.returncode, second.returncode, v.returncode]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8x32000,32x128000,64x256000", help="BATCHxVOCAB,...")
    ap.add_argument("--out", type=Path, default=Path("runs/engine-promise"))
    ap.add_argument("--rounds", type=int, default=8, help="verify's rounds per side")
    ap.add_argument("--pairs", type=int, default=16, help="the direct A/B's pairs of batches")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes.split(","):
        batch, vocab = (int(x) for x in size.split("x"))
        row = one_size(batch, vocab, args.out, args.rounds, args.pairs)
        rows.append(row)
        ab, d, v = row["promise"]["program_ab"] or {}, row["direct"], row["verify"]
        print(f"b{batch} v{vocab}: promise {row['promise']['how']} x{ab.get('ratio', float('nan')):.3f} "
              f"[{(ab.get('ratio_interval') or [math.nan] * 2)[0]:.3f}, {(ab.get('ratio_interval') or [math.nan] * 2)[1]:.3f}] "
              f"({ab.get('outcome', row['promise']['program_unmeasured'])}, {ab.get('rounds')} rounds); "
              f"verify x{v.get('ratio', math.nan):.3f} [{v.get('ci_low', math.nan):.3f}, {v.get('ci_high', math.nan):.3f}] "
              f"({v.get('outcome')}, {v.get('blocks')} pairs); direct x{d['ratio']:.3f} [{d['interval'][0]:.3f}, "
              f"{d['interval'][1]:.3f}] ({d['a_ms']:.2f} -> {d['b_ms']:.2f} ms, {d['pairs']} pairs); diagnose "
              f"{row['diagnose_first_s']:.1f} s then {row['diagnose_reused_s']:.1f} s, JSON identical {row['json_identical']}; "
              f"load {', '.join(f'{x:.1f}' for x in row['load'])}", flush=True)
    (args.out / "engine_promise.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
