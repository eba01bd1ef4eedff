"""Measure hlo-doctor gate's false-alarm rate (A/A) and detection rate (an injected logits copy).

Captures, each with ``hlo-doctor profile FILE:FUNC`` in a process of its own (as CI captures a
candidate apart from the committed baseline):

* ``2N`` runs of the fixed step ``A``: a small decoder step (embedding, two MLP blocks, an LM head
  to bf16 logits) whose greedy sampler takes the bf16 logits and widens them inside its program;
* ``N`` runs of the regressed step ``B``: the same model, but the logits are widened eagerly (a
  standalone ``convert_element_type`` program) and the sampler returns its f32 input, so XLA puts
  the aliasing copy of the logits back.

Then it gates each A/A pair in both orders (``2N`` comparisons; a failure is a false alarm) and B
against both A's captured beside it (``2N`` comparisons; a failure is a detection), with the default
policy, under ``--strict``, and with a timing-only policy (``fail_on_new = []``: what the statistics
alone catch), and prints the rates with 95% Wilson intervals. ``--reuse`` gates captures already in
``--workdir`` again instead of capturing (to compare policies on the same captures).

Usage::

    .venv/bin/python benchmarks/bench_gate_rates.py --pairs 20 [--steps 20] [--json rates.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Model size: small enough for a shared 2-core CPU, shaped like a decode step at batch 64.
BATCH, HIDDEN, VOCAB, LAYERS = 64, 256, 32000, 2

_STATE: dict[str, Any] = {}


def _params() -> dict[str, Any]:
    """Weights and inputs, built once per process and passed as arguments (never closed over)."""
    if not _STATE:
        import jax
        import jax.numpy as jnp

        keys = jax.random.split(jax.random.PRNGKey(0), 2 + 2 * LAYERS)
        _STATE["embed"] = (jax.random.normal(keys[0], (VOCAB, HIDDEN)) * 0.02).astype(jnp.bfloat16)
        _STATE["layers"] = [
            ((jax.random.normal(keys[2 + 2 * i], (HIDDEN, 4 * HIDDEN)) * 0.02).astype(jnp.bfloat16),
             (jax.random.normal(keys[3 + 2 * i], (4 * HIDDEN, HIDDEN)) * 0.02).astype(jnp.bfloat16))
            for i in range(LAYERS)
        ]
        _STATE["head"] = (jax.random.normal(keys[1], (HIDDEN, VOCAB)) * 0.02).astype(jnp.bfloat16)
        _STATE["tokens"] = jnp.arange(BATCH, dtype=jnp.int32) % VOCAB
    return _STATE


def _decode() -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def decode(embed, layers, head, tokens):
        x = embed[tokens]
        for w_in, w_out in layers:
            x = x + jax.nn.gelu(x @ w_in) @ w_out
        return (x @ head).astype(jnp.bfloat16)

    return decode


def _samplers() -> tuple[Callable[..., Any], Callable[..., Any]]:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def sample(logits):  # fixed: bf16 in, argmax on bf16, one widening convert in the program
        return jnp.argmax(logits, axis=-1), logits.astype(jnp.float32)

    fixed = sample

    @jax.jit
    def sample(logits):  # noqa: F811 - the regressed sampler keeps the same name (module jit_sample)
        return jnp.argmax(logits, axis=-1), logits  # returns its f32 input: aliasing copy

    return fixed, sample


def step_fixed() -> Any:
    """One decode step with the fixed sampler (profile target A)."""
    p = _params()
    if "fixed" not in _STATE:
        _STATE["decode"] = _decode()
        _STATE["fixed"], _STATE["regressed"] = _samplers()
    logits = _STATE["decode"](p["embed"], p["layers"], p["head"], p["tokens"])
    return _STATE["fixed"](logits)


def step_regressed() -> Any:
    """One decode step with the eager widening and the input-returning sampler (target B)."""
    import jax.numpy as jnp

    p = _params()
    if "regressed" not in _STATE:
        _STATE["decode"] = _decode()
        _STATE["fixed"], _STATE["regressed"] = _samplers()
    logits = _STATE["decode"](p["embed"], p["layers"], p["head"], p["tokens"])
    return _STATE["regressed"](logits.astype(jnp.float32))


def _hlo_doctor() -> str:
    exe = Path(sys.executable).with_name("hlo-doctor")
    return str(exe) if exe.exists() else "hlo-doctor"


def _capture(func: str, out: Path, steps: int, warmup: int) -> float:
    t0 = time.perf_counter()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [_hlo_doctor(), "profile", f"{Path(__file__).resolve()}:{func}", "--out", str(out),
         "--steps", str(steps), "--warmup", str(warmup), "--top", "1"],
        capture_output=True, text=True, env=env, check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"capture of {func} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def _wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate of k in n (scipy's)."""
    if n == 0:
        return (math.nan, math.nan)
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def main(argv: list[str] | None = None) -> int:
    """Capture, gate, print the rates."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=20, help="A/A pairs and A/B pairs (default 20)")
    parser.add_argument("--steps", type=int, default=20, help="traced steps per capture (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untraced warm-up steps (default 3)")
    parser.add_argument("--workdir", type=Path, help="keep the captures here (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="write the figures and every pair's outcome here")
    parser.add_argument("--reuse", action="store_true", help="gate the captures already in --workdir")
    args = parser.parse_args(argv)

    import numpy as np

    from hlo_doctor.gate import GatePolicy, gate
    from hlo_doctor.opstats import load_opstats

    work = args.workdir or Path(tempfile.mkdtemp(prefix="gate-rates-"))
    work.mkdir(parents=True, exist_ok=True)
    n = args.pairs
    print(f"capturing {2 * n} x A (fixed) and {n} x B (copy + convert put back), {args.steps} steps each, "
          f"into {work}", file=sys.stderr)
    t0 = time.perf_counter()
    a_runs, b_runs, seconds = [], [], []
    # Interleave A, A, B so that a slow stretch of the shared machine hits both kinds of pair.
    for i in range(n):
        for func, runs, name in (("step_fixed", a_runs, f"a{2 * i}"), ("step_fixed", a_runs, f"a{2 * i + 1}"),
                                 ("step_regressed", b_runs, f"b{i}")):
            if not (args.reuse and (work / name / "run.json").is_file()):
                seconds.append(_capture(func, work / name, args.steps, args.warmup))
            runs.append(work / name)
        if not args.reuse:
            print(f"  {3 * (i + 1)}/{3 * n} captures ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)

    stats = {p: load_opstats(p) for p in [*a_runs, *b_runs]}
    policies = {
        "default": (GatePolicy(), False),
        "strict": (GatePolicy(), True),
        "timing-only": (GatePolicy(fail_on_new=()), False),
    }
    records: list[dict[str, Any]] = []
    for i in range(n):
        # Both orders of each A/A pair: a capture-level speed difference must not hide behind the order.
        pairs = (("A/A", a_runs[2 * i], a_runs[2 * i + 1]), ("A/A", a_runs[2 * i + 1], a_runs[2 * i]),
                 ("A/B", a_runs[2 * i], b_runs[i]), ("A/B", a_runs[2 * i + 1], b_runs[i]))
        for kind, base, cand in pairs:
            for pname, (policy, strict) in policies.items():
                r = gate(stats[base], stats[cand], policy, strict=strict,
                         baseline_label=base.name, candidate_label=cand.name)
                records.append({
                    "pair": i, "kind": kind, "policy": pname, "baseline": base.name, "candidate": cand.name,
                    "verdict": str(r.verdict), "exit_code": int(r.exit_code),
                    "rules": sorted({v.rule for v in r.violations}),
                    "violations": [v.message for v in r.violations],
                    "step_ratio": r.step.ratio if r.step else None,
                    "step_outcome": str(r.step.outcome) if r.step else None,
                    "within_noise": len(r.within_noise),
                    "speed_factor": r.speed_factor,
                    "capture_noise": r.capture_noise,
                })

    def rate(kind: str, pname: str) -> tuple[int, int]:
        rows = [x for x in records if x["kind"] == kind and x["policy"] == pname]
        return sum(x["exit_code"] == 1 for x in rows), len(rows)

    print()
    took = f"; captures took {min(seconds):.1f}-{max(seconds):.1f} s each" if seconds else ""
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end "
          f"(shared with other test runs){took}")
    medians = {p.name: float(np.median(s.step_times_us)) for p, s in stats.items() if s.step_times_us}
    if medians:
        print(f"median step time per capture: {min(medians.values()) / 1e3:.1f}-{max(medians.values()) / 1e3:.1f} ms "
              f"({max(medians.values()) / min(medians.values()):.1f}x apart)")
    print(f"{'policy':<12} {'false alarms (A/A, both orders)':<32} {'detections (A/B)':<28}")
    figures: dict[str, Any] = {}
    for pname in policies:
        fa, fn_ = rate("A/A", pname)
        de, dn = rate("A/B", pname)
        fa_ci, de_ci = _wilson(fa, fn_), _wilson(de, dn)
        figures[pname] = {"false_alarms": fa, "aa_pairs": fn_, "detections": de, "ab_pairs": dn,
                          "false_alarm_ci95": fa_ci, "detection_ci95": de_ci}
        print(f"{pname:<12} {f'{fa}/{fn_} = {fa / fn_:.0%} [{fa_ci[0]:.0%}, {fa_ci[1]:.0%}]':<32} "
              f"{f'{de}/{dn} = {de / dn:.0%} [{de_ci[0]:.0%}, {de_ci[1]:.0%}]':<28}")
    aa = [x for x in records if x["kind"] == "A/A" and x["policy"] == "default" and x["step_ratio"]]
    ratios = sorted(x["step_ratio"] for x in aa)
    if ratios:
        print(f"A/A step-time ratios (candidate/baseline median, after the machine-speed factor): min {ratios[0]:.3f}, "
              f"median {ratios[len(ratios) // 2]:.3f}, max {ratios[-1]:.3f}")
    alarms = [x for x in records if x["kind"] == "A/A" and x["policy"] == "default" and x["exit_code"]]
    for x in alarms:
        print(f"  false alarm {x['baseline']} vs {x['candidate']}: {'; '.join(x['violations'])}")
    missed = [x for x in records if x["kind"] == "A/B" and x["policy"] == "default" and not x["exit_code"]]
    for x in missed:
        print(f"  missed {x['baseline']} vs {x['candidate']}")
    example = next((x for x in records if x["kind"] == "A/B" and x["policy"] == "default"), None)
    if example:
        print("example detection: " + " | ".join(example["violations"]))
    if args.json:
        args.json.write_text(json.dumps({
            "batch": BATCH, "hidden": HIDDEN, "vocab": VOCAB, "layers": LAYERS, "steps": args.steps,
            "pairs": n, "figures": figures, "records": records,
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
