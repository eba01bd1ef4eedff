"""What-if runner: how much of a decode step each removed waste was worth, measured in one process.

    python benchmarks/field/whatif.py benchmarks/field/kerashub_gemma.py [--rounds 12]
        [--variants no-softmax,cache-in-place] [--json OUT.json]

The loop file exposes ``VARIANTS`` (name -> no-argument callable, ``"baseline"`` first: the library
as shipped; every other entry the same loop with one waste removed) and optionally ``tokens(out)``
(the greedy tokens of one call, for the equality check; default ``np.asarray``).

Every variant is called twice before timing (compiles, caches), and its tokens are compared with
the baseline's. Then, for each variant, baseline and variant calls alternate (AB BA AB ...,
``--rounds`` pairs) in the same process, so that load from other processes on the shared cores
hits both sides alike. Reported per variant: the median step of each side, the saving (median
baseline - median variant) in ms and in % of the baseline step, and a paired bootstrap 95% CI of
the saving, on two clocks: wall time, and the process's CPU time (all its threads; far less
sensitive to other processes on shared cores, which stretch wall time but not the work done).
``--clock`` picks the one printed first (default: cpu). ``--aa`` adds the baseline timed against
itself: the noise floor of a saving under the load of the moment.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from scipy import stats


def load(path: str) -> Any:
    """Import a loop file by path (its module-level code builds the model once)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"whatif: cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall and process-CPU seconds one call takes, blocked until its outputs are ready, and the
    outputs."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - t0, time.process_time() - c0, out


def saving_ci(base: np.ndarray, var: np.ndarray) -> tuple[float, float]:
    """Paired bootstrap 95% CI of median(base) - median(var), in the arrays' unit."""
    res = stats.bootstrap((base, var), lambda b, v, axis=-1: np.median(b, axis=axis)
                          - np.median(v, axis=axis), paired=True, vectorized=True,
                          n_resamples=4000, method="percentile", random_state=0)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def measure(mod: Any, names: list[str], rounds: int) -> dict[str, Any]:
    """Warm, check tokens, interleave, and summarise every named variant against the baseline."""
    variants = mod.VARIANTS
    to_tokens = getattr(mod, "tokens", np.asarray)
    base_fn = variants["baseline"]
    warm: dict[str, float] = {}
    toks: dict[str, np.ndarray] = {}
    for name in ["baseline", *names]:
        t_first, _, _ = timed(variants[name])
        _, _, out = timed(variants[name])
        warm[name] = t_first
        toks[name] = to_tokens(out)
    report: dict[str, Any] = {"config": getattr(mod, "CONFIG", {}), "rounds": rounds,
                              "first_call_s": warm, "variants": {}}
    for name in names:
        fn = variants[name]
        samples: dict[str, list[list[float]]] = {"wall": [[], []], "cpu": [[], []]}
        for r in range(rounds):
            order = [(base_fn, 0), (fn, 1)]
            for f, side in order if r % 2 == 0 else order[::-1]:
                wall, cpu, _ = timed(f)
                samples["wall"][side].append(wall * 1e3)
                samples["cpu"][side].append(cpu * 1e3)
        entry: dict[str, Any] = {
            "tokens_equal": bool(toks[name].shape == toks["baseline"].shape
                                 and (toks[name] == toks["baseline"]).all())}
        for clock, (base, var) in samples.items():
            b, v = np.array(base), np.array(var)
            mb, mv = float(np.median(b)), float(np.median(v))
            lo, hi = saving_ci(b, v)
            entry[clock] = {"baseline_ms": mb, "variant_ms": mv, "saving_ms": mb - mv,
                            "saving_pct": 100 * (mb - mv) / mb, "ci95_ms": [lo, hi],
                            "ci95_pct": [100 * lo / mb, 100 * hi / mb],
                            "baseline_samples_ms": base, "variant_samples_ms": var}
        report["variants"][name] = entry
    return report


def main() -> None:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("loop")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--variants", default="", help="comma-separated (default: all)")
    ap.add_argument("--json", default="")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--aa", action="store_true",
                    help="also time the baseline against itself (variant 'a/a')")
    args = ap.parse_args()
    mod = load(args.loop)
    names = [n for n in (args.variants.split(",") if args.variants else mod.VARIANTS)
             if n and n != "baseline"]
    if args.aa:
        # The baseline against itself: the noise floor of a saving on these cores.
        mod.VARIANTS["a/a"] = mod.VARIANTS["baseline"]
        names.append("a/a")
    report = measure(mod, names, args.rounds)
    report["loop"] = args.loop
    report["clock"] = args.clock
    print(f"{args.loop}  {json.dumps(report['config'])}  rounds={args.rounds}")
    clocks = [args.clock, "wall" if args.clock == "cpu" else "cpu"]
    print(f"{'variant':<20}{'clock':>6}{'base ms':>9}{'var ms':>9}{'saved ms':>10}{'saved %':>9}"
          f"{'95% CI (ms)':>20}{'95% CI (%)':>16}  tokens")
    for name, entry in report["variants"].items():
        for clock in clocks:
            r = entry[clock]
            ci, cp = r["ci95_ms"], r["ci95_pct"]
            print(f"{name if clock == clocks[0] else '':<20}{clock:>6}{r['baseline_ms']:9.2f}"
                  f"{r['variant_ms']:9.2f}{r['saving_ms']:10.2f}{r['saving_pct']:9.1f}"
                  f"{f'[{ci[0]:.2f}, {ci[1]:.2f}]':>20}{f'[{cp[0]:.1f}, {cp[1]:.1f}]':>16}  "
                  f"{('equal' if entry['tokens_equal'] else 'DIFFER') if clock == clocks[0] else ''}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
