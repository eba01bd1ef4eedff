"""Measure verify's check 5: its A/A false-alarm rate and its detection rate of a known ~5% change.

Each repeat is one A/B run as verify measures one: two variants jitted separately (as two engine trees
are loaded side by side), each warmed up, then 6 pairs of interleaved rounds (AB, BA, ...; the core's
:func:`hlo_doctor.verify.rounds.run_rounds`) of 15 timed steps each (the decode steps of a round at
verify's default 16 tokens). The step is a small decoder-like program: ``layers`` blocks of
``x + gelu(x @ w)`` on ``[batch, hidden]`` bf16. The variant with extra work runs one block more
(21 instead of 20 at the defaults: ~5% more work per step; the ratio it really costs is measured
before the repeats over alternated steps and printed).

Three kinds of repeat, in turn, so that a slow stretch of the shared machine hits all alike:

* ``A/A``: the same program on both sides (its two compiles): anything but ``no change`` is wrong;
  ``improved``/``regressed`` is a false alarm (a false PASS with ``--require-improvement``, a false
  FAIL otherwise), ``inconclusive`` a false FAIL for want of power;
* ``A/B``: the treatment does ~5% more work: detected when ``regressed``;
* ``B/A``: the treatment does ~5% less work: detected when ``improved``.

Every repeat's rounds are judged twice: by check 5 as it decides now (the decode steps, paired rounds:
:func:`hlo_doctor.verify.stats.compare_rounds`, plus the paired throughput must not regress), and as it
decided before (Mann-Whitney U and a bootstrap CI on the 6 per-round throughputs, and the pooled steps
must not regress: :func:`hlo_doctor.verify.checks.check_throughput`). With ``--budget S`` each repeat
also adds pairs until the verdict decides or ``S`` seconds of rounds are spent (alpha spent per look).

``--rejudge verify.json ...`` judges the rounds of verify runs already made both ways instead (the
per-round step times and throughputs are in every ``verify.json``): before and after on the same runs.

Usage::

    .venv/bin/python benchmarks/bench_verify_rates.py --repeats 20 [--steps 15] [--pairs 6] [--budget 30]
        [--json rates.json]
    .venv/bin/python benchmarks/bench_verify_rates.py --rejudge OUT/verify.json [...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

BATCH, HIDDEN, LAYERS = 32, 512, 20


def _program(layers: int) -> Callable[..., Any]:
    """A freshly jitted step of ``layers`` blocks (a variant of its own, compiled on its own)."""
    import jax

    def step(x: Any, w: Any) -> Any:
        for _ in range(layers):
            x = x + jax.nn.gelu(x @ w)
        return x

    return jax.jit(step)


class Variant:
    """One side: its jitted step, its inputs, and its rounds' step times."""

    def __init__(self, layers: int, x: Any, w: Any) -> None:
        self.fn, self.x, self.w = _program(layers), x, w
        self.rounds: list[list[float]] = []
        self.throughputs: list[float] = []
        self.fn(x, w).block_until_ready()  # compile and warm outside every measured window

    def step_ms(self) -> float:
        t0 = time.perf_counter()
        self.fn(self.x, self.w).block_until_ready()
        return (time.perf_counter() - t0) * 1e3

    def measure_round(self, steps: int) -> None:
        t0 = time.perf_counter()
        times = [self.step_ms() for _ in range(steps)]
        self.throughputs.append(steps * BATCH / (time.perf_counter() - t0))
        self.rounds.append(times)


def _inputs() -> tuple[Any, Any]:
    import jax
    import jax.numpy as jnp

    kx, kw = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(kx, (BATCH, HIDDEN)).astype(jnp.bfloat16)
    w = (jax.random.normal(kw, (HIDDEN, HIDDEN)) * 0.02).astype(jnp.bfloat16)
    return x, w


def _true_ratio(x: Any, w: Any, layers: int, steps: int) -> float:
    """Median step of the extra-work program over the plain one's, alternating steps (no rounds)."""
    import numpy as np

    a, b = Variant(layers, x, w), Variant(layers + 1, x, w)
    ta, tb = [], []
    for _ in range(steps):
        ta.append(a.step_ms())
        tb.append(b.step_ms())
    return float(np.median(tb) / np.median(ta))


class Settings:
    """What verify's statistics read of its settings, at verify's defaults."""

    def __init__(self) -> None:
        from hlo_doctor.verify.settings import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT

        self.min_effect, self.alpha, self.seed = DEFAULT_MIN_EFFECT, DEFAULT_ALPHA, 0


def _repeat(kind: str, x: Any, w: Any, args: argparse.Namespace, settings: Settings,
            budget_s: float | None) -> dict[str, Any]:
    from hlo_doctor.statistics import Outcome
    from hlo_doctor.verify.checks import check_step_verdict, check_throughput
    from hlo_doctor.verify.rounds import run_rounds
    from hlo_doctor.verify.stats import alpha_at_look, compare, compare_rounds

    base_layers, treat_layers = {"A/A": (LAYERS, LAYERS), "A/B": (LAYERS, LAYERS + 1),
                                 "B/A": (LAYERS + 1, LAYERS)}[kind]
    sides = {"baseline": Variant(base_layers, x, w), "treatment": Variant(treat_layers, x, w)}

    def alpha(look: int) -> float:
        return settings.alpha if budget_s is None else alpha_at_look(settings.alpha, look)

    def step(look: int) -> Any:
        return compare_rounds(settings, sides["baseline"].rounds, sides["treatment"].rounds, alpha=alpha(look))

    stop = run_rounds(args.pairs, lambda label, order: sides[label].measure_round(args.steps), budget_s=budget_s,
                      decided=lambda look: step(look).outcome != Outcome.INCONCLUSIVE)
    b, t = sides["baseline"], sides["treatment"]
    now_step = step(stop.looks)
    now_thr = compare_rounds(settings, [[v] for v in b.throughputs], [[v] for v in t.throughputs],
                             lower_is_better=False, alpha=alpha(stop.looks))
    now = check_step_verdict(now_step, now_thr, False, stop)
    record: dict[str, Any] = {
        "kind": kind, "rounds": stop.rounds, "spent_s": stop.spent_s, "stopping": stop.describe(),
        "now": {"outcome": str(now_step.outcome), "passed": now.passed, "ratio": now_step.ratio,
                "ci": [now_step.ci_low, now_step.ci_high], "p": now_step.p_value,
                "throughput": str(now_thr.outcome)},
    }
    if budget_s is None:
        # Check 5 as it decided before, on the same rounds.
        thr = compare(settings, b.throughputs, t.throughputs, lower_is_better=False)
        pooled = compare(settings, [s for r in b.rounds for s in r], [s for r in t.rounds for s in r])
        before = check_throughput(thr, pooled, False)
        record["before"] = {"outcome": str(thr.outcome), "passed": before.passed, "ratio": thr.ratio,
                            "ci": [thr.ci_low, thr.ci_high], "p": thr.p_value,
                            "pooled_steps": str(pooled.outcome), "pooled_p": pooled.p_value,
                            "pooled_ratio": pooled.ratio}
    return record


def _wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate of k in n (scipy's)."""
    if n == 0:
        return (math.nan, math.nan)
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def _rate(k: int, n: int) -> str:
    lo, hi = _wilson(k, n)
    return f"{k}/{n} = {k / n:.0%} [{lo:.0%}, {hi:.0%}]" if n else "-"


EXPECTED = {"A/A": "no change", "A/B": "regressed", "B/A": "improved"}


def _summary(records: list[dict[str, Any]], which: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, want in EXPECTED.items():
        rows = [r[which] for r in records if r["kind"] == kind and which in r]
        counts = Counter(r["outcome"] for r in rows)
        wrong = sum(r["outcome"] in ("improved", "regressed") and r["outcome"] != want for r in rows)
        out[kind] = {"n": len(rows), "outcomes": dict(counts), "right": counts.get(want, 0), "false_alarms": wrong,
                     "passed": sum(r["passed"] for r in rows)}
    return out


def _print(summary: dict[str, Any], title: str) -> None:
    print(f"{title}")
    for kind, s in summary.items():
        n = s["n"]
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s["outcomes"].items()))
        label = {"A/A": "no change (right)", "A/B": "regressed (detected)", "B/A": "improved (detected)"}[kind]
        print(f"  {kind}: {label} {_rate(s['right'], n)}; false alarms {_rate(s['false_alarms'], n)}; "
              f"check 5 passed {s['passed']}/{n}; outcomes: {outcomes}")


def rejudge(path: str, settings: Settings) -> str:
    """Check 5 before and now on the rounds of one ``verify.json``, as a line."""
    from hlo_doctor.verify.checks import check_step_verdict, check_throughput
    from hlo_doctor.verify.stats import compare, compare_rounds

    with open(path) as f:
        doc = json.load(f)
    rounds = {side: doc[side]["rounds"] for side in ("baseline", "treatment")}
    steps = {side: [r["step_times_ms"] for r in rs] for side, rs in rounds.items()}
    thr = {side: [r["throughput_tok_s"] for r in rs] for side, rs in rounds.items()}
    old_thr = compare(settings, thr["baseline"], thr["treatment"], lower_is_better=False)
    pooled = compare(settings, [s for r in steps["baseline"] for s in r], [s for r in steps["treatment"] for s in r])
    before = check_throughput(old_thr, pooled, False)
    step = compare_rounds(settings, steps["baseline"], steps["treatment"])
    new_thr = compare_rounds(settings, [[v] for v in thr["baseline"]], [[v] for v in thr["treatment"]],
                             lower_is_better=False)
    now = check_step_verdict(step, new_thr, False)
    pooled_p = f"pooled steps x{pooled.ratio:.3f}, CI [{pooled.ci_low:.3f}, {pooled.ci_high:.3f}], p={pooled.p_value:.2g}"
    import numpy as np
    from scipy import stats

    pairs = [math.exp(stats.trim_mean(np.log(t), 0.2) - stats.trim_mean(np.log(b), 0.2))
             for b, t in zip(steps["baseline"], steps["treatment"], strict=False)]
    return (f"{path}: {len(steps['baseline'])} rounds x {len(steps['baseline'][0])} steps a side; per-pair step "
            f"ratios {', '.join(f'{r:.3f}' for r in pairs)}\n"
            f"  before: {'PASS' if before.passed else 'FAIL'} {before.figure} ({pooled_p})\n"
            f"  now:    {'PASS' if now.passed else 'FAIL'} {now.figure}")


def main(argv: list[str] | None = None) -> int:
    """Calibrate, run the repeats, print the rates."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="repeats of each kind (default 20)")
    parser.add_argument("--pairs", type=int, default=6, help="pairs of rounds (verify's --rounds; default 6)")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per round (default 15)")
    parser.add_argument("--budget", type=float, help="also run every repeat with this --budget (seconds)")
    parser.add_argument("--json", help="write the figures and every repeat's outcome here")
    parser.add_argument("--rejudge", nargs="+", metavar="VERIFY_JSON", help="judge these verify runs' rounds "
                        "before and now instead of measuring")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    settings = Settings()
    if args.rejudge:
        for path in args.rejudge:
            print(rejudge(path, settings))
        return 0
    x, w = _inputs()
    t0 = time.perf_counter()
    true = _true_ratio(x, w, LAYERS, 200)
    print(f"step: {LAYERS} vs {LAYERS + 1} blocks of [{BATCH}, {HIDDEN}] bf16; the extra block costs x{true:.3f} "
          f"(median of 200 alternated steps)", file=sys.stderr)
    records: list[dict[str, Any]] = []
    budget_records: list[dict[str, Any]] = []
    loads = []
    for i in range(args.repeats):
        for kind in EXPECTED:
            records.append(_repeat(kind, x, w, args, settings, None))
            if args.budget is not None:
                budget_records.append(_repeat(kind, x, w, args, settings, args.budget))
        loads.append(os.getloadavg()[0])
        print(f"  repeat {i + 1}/{args.repeats} ({time.perf_counter() - t0:.0f} s, load {loads[-1]:.2f})",
              file=sys.stderr)
    print(f"machine: {os.cpu_count()} CPUs, load average {min(loads):.2f}-{max(loads):.2f} during the repeats; "
          f"{time.perf_counter() - t0:.0f} s in all; the extra block costs x{true:.3f}")
    steps = [r["now"]["ratio"] for r in records if r["kind"] == "A/A"]
    print(f"{args.pairs} pairs of rounds x {args.steps} steps per variant; A/A step ratios "
          f"{min(steps):.3f}-{max(steps):.3f}")
    now, before = _summary(records, "now"), _summary(records, "before")
    _print(before, "before: check 5 on the per-round throughput (Mann-Whitney U, bootstrap CI)")
    _print(now, "now: check 5 on the steps, paired rounds (t-test over the pairs)")
    figures: dict[str, Any] = {"before": before, "now": now, "true_ratio": true, "load": [min(loads), max(loads)]}
    if budget_records:
        budget = _summary(budget_records, "now")
        _print(budget, f"now, --budget {args.budget:g}: pairs added until decided (alpha spent per look)")
        rounds = [r["rounds"] for r in budget_records]
        print(f"  rounds a side with the budget: {min(rounds)}-{max(rounds)}, median {sorted(rounds)[len(rounds) // 2]}")
        figures["budget"] = budget
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": BATCH, "hidden": HIDDEN, "layers": LAYERS, "pairs": args.pairs, "steps": args.steps,
                       "budget": args.budget, "figures": figures, "records": records,
                       "budget_records": budget_records}, f, indent=1, default=str)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
