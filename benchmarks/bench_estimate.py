"""Promised vs measured: diagnose's recoverable time against what verify measures, engine size by size.

For each engine size (batch x vocab) on this machine's backend:

1. **profile** the bundled reference engine (``capture_engine``: the decode step of ``profile_target``
   at the configuration verify runs, ``--steps`` traced after ``--warmup``; the Python tracer on);
2. **diagnose** the capture: the promise is the recoverable time per step of the findings whose fix
   is ``bf16-greedy-sampler`` (each op counted once, as the summary counts it), in ms and as a share
   of the profiled step (the mean of the traced ``decode`` step annotations);
3. **verify** ``--fix bf16-greedy-sampler`` at the same size (the capture of step 1 as the baseline
   run): the measured saving is the baseline's median decode step times (1 - the ratio of medians),
   with the ratio's bootstrap CI; verify's decode step is ``execute_decode`` plus the tokens copied
   to the host, timed without the profiler.

The two steps are not the same measurement (the profiled step runs under the profiler, verify's does
not), so the table gives the promise both ways: in ms of the profiled step, and as its share of the
profiled step applied to verify's baseline step ("scaled"). Then, with no accelerator here, the promise
read from the H200 captures against the captures of the fixed programs (``sample_traces/gpu_h200_*``:
the same profiled step on both sides; the saving is the mean step's change, and that change less the
change of the source lines both captures run and no finding names: :func:`capture_saving`) and, for
the engine, against the decode-step ratios verify measured on that machine (x0.748 and x0.607,
docs/verify.md). The table goes to stdout (Markdown),
the rows to ``OUT/estimate.json`` (written after each size). Slow: ~1-4 minutes per size on 2 cores.

Usage::

    python benchmarks/bench_estimate.py [--batch 16,32] [--vocab 32000,128000] [--rounds 6]
        [--max-tokens 16] [--steps 5] [--warmup 2] [--out runs/bench_estimate] [--json FILE]
    python benchmarks/bench_estimate.py --rediagnose --out runs/bench_estimate   # new rules, same runs
    python benchmarks/bench_estimate.py --programs all --write-docs   # the rules' own programs, 3 sizes each
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIX = "bf16-greedy-sampler"
H200_CAPTURE = ROOT / "sample_traces" / "gpu_h200_original"
H200_FIXED = ROOT / "sample_traces" / "gpu_h200_fixed"
H200_SEED = (ROOT / "sample_traces" / "gpu_h200_seed_b512", ROOT / "sample_traces" / "gpu_h200_seed_b512_fixed")
H200_STEP_RATIOS = (0.748, 0.607)
"""verify's decode-step ratio (treatment / baseline medians) of the full fix on the H200, two runs."""


def promise(run: Path) -> dict[str, Any]:
    """Diagnose ``run``: the recoverable time per step of the findings the fix removes."""
    from dataclasses import replace

    from hlo_doctor.lint import diagnose, load_context, load_rulebook, total_recoverable
    from hlo_doctor.lint.promise import fix_cost

    # What-if runs on: where the capture cannot price a finding on XLA:CPU, this machine times it.
    ctx = replace(load_context(run), what_if=True)
    d = diagnose(ctx, load_rulebook())
    fixed = [f for f in d.findings if f.fix == FIX]
    step = d.step_time_us or 0.0
    recovered, cost = total_recoverable(fixed), fix_cost(fixed)
    promised = recovered - cost
    return {
        "profiled_step_us": step, "step_source": ctx.breakdown.step_source if ctx.breakdown else "",
        "num_steps": d.num_steps, "promise_us": promised, "promise_pct": 100.0 * promised / step if step else None,
        "recovered_us": recovered, "fix_cost_us": cost,
        "summary": d.summary_line(), "recoverable_us": d.recoverable_us,
        "findings": [{"code": f.code, "op": f"{f.module}/{f.op}" if f.op else f.source, "fix": f.fix,
                      "time_per_step_us": f.time_per_step_us, "recoverable_us": f.recoverable_us,
                      "extra": {k: v for k, v in f.extra if k in ("host_us_per_step", "host_dispatch_us_per_step",
                                                                  "host_python_us_per_step", "held_by", "what_if",
                                                                  "fix_cost_us", "runtime_gap_before_us_per_step",
                                                                  "runtime_gap_after_us_per_step")}}
                     for f in d.findings],
    }


def measure(batch: int, vocab: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Profile, diagnose and verify one engine size."""
    from hlo_doctor.engines import load_engine
    from hlo_doctor.engines.session import capture_engine
    from hlo_doctor.verify import VerifySettings, engine_config, run_verify

    common = {"batch": batch, "vocab": vocab, "rounds": args.rounds, "max_tokens": args.max_tokens}
    module = load_engine(None)
    config = engine_config(module, VerifySettings(fix=FIX, **common))  # type: ignore[arg-type]
    t0 = time.perf_counter()
    run = capture_engine(module, config, name=f"engine b{batch} v{vocab}", out_dir=out / f"profile-b{batch}-v{vocab}",
                         steps=args.steps, warmup=args.warmup)
    promised = promise(run)
    t1 = time.perf_counter()
    report = run_verify(VerifySettings(fix=FIX, baseline_run=run, out_dir=out / f"verify-b{batch}-v{vocab}",
                                       **common))  # type: ignore[arg-type]
    t2 = time.perf_counter()
    st = report.step_time
    base_ms = report.baseline.median("tpot_ms") if st is None else st.baseline_median
    row: dict[str, Any] = {"batch": batch, "vocab": vocab, **promised, "verify_passed": report.passed,
                           "verify_verdict": report.verdict, "profile_s": t1 - t0, "verify_s": t2 - t1}
    # The same step definition on both sides: verify's capture of the fixed engine (check 4), profiled
    # like step 1, against step 1's capture. Few steps, so noisier than verify's rounds.
    fixed_step = report.treatment_hlo.step_time_us if report.treatment_hlo else None
    if fixed_step:
        row["profiled_fixed_step_us"] = fixed_step
        row["profiled_saving_us"] = promised["profiled_step_us"] - fixed_step
    # What the fix narrows: the argmax now reads bf16 (on XLA:CPU priced by a what-if run, lint.whatif).
    row["narrowed"] = [{"op": f"{o.module}/{o.op}", "before_us": o.time_per_step_us,
                        "after_us": o.treatment_time_per_step_us} for o in report.removed_ops if o.status == "narrowed"]
    row["removed_ops_us"] = report.removed_time_per_step_us
    # The promise with the narrowed argmax's change as the two profiled captures show it in place of
    # the what-if run's cost (jaxlib 0.10.2 runs the bf16 argmax slower, 0.11.2 faster).
    change = sum(n["before_us"] - n["after_us"] for n in row["narrowed"]
                 if n["before_us"] is not None and n["after_us"] is not None)
    row["promise_with_narrowed_us"] = promised["recovered_us"] + change
    if st is not None:
        row.update({
            "verify_step_ms": [st.baseline_median, st.candidate_median], "step_ratio": st.ratio,
            "step_ratio_ci": [st.ci_low, st.ci_high], "steps_per_side": [st.n_baseline, st.n_candidate],
            "measured_ms": base_ms * (1.0 - st.ratio),
            "measured_ms_ci": [base_ms * (1.0 - st.ci_high), base_ms * (1.0 - st.ci_low)],
        })
        row["promise_scaled_ms"] = (row["promise_pct"] or 0.0) / 100.0 * base_ms
    return row


def capture_saving(before: Any, after: Any, findings: list[Any]) -> dict[str, float]:
    """What the fix saved per step between two profiled captures (contexts), in us: the change of the
    mean step less the change of the host time of the source lines present in both captures that no
    finding of the fix names (``findings``' first frames): work the fix does not touch, whose change
    between two captures of a few steps is their noise. Lines present in one capture only, the
    harness and the host's wait for the device (no line of one's own) stay in the saving."""
    import os

    def by_line(ctx: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in ctx.breakdown.lines if ctx.breakdown is not None else ():
            out[line.where] = out.get(line.where, 0.0) + line.host_us
        return out

    named = {f"{os.path.basename(f.stack[0][0])}:{f.stack[0][1]} {f.stack[0][2]}" for f in findings if f.stack}
    a, b = by_line(before), by_line(after)
    untouched = sum(b[w] - a[w] for w in set(a) & set(b) if w and w not in named)
    step = (before.breakdown.wall_us - after.breakdown.wall_us) if before.breakdown and after.breakdown else 0.0
    return {"step_change_us": step, "untouched_change_us": untouched, "saving_us": step + untouched}


def h200(original: Path = H200_CAPTURE, fixed: Path = H200_FIXED) -> dict[str, Any]:
    """The promise read from an H200 capture against the capture of the fixed program (the same
    profiled step on both sides) and, for the engine, the decode-step ratios verify measured there."""
    from hlo_doctor.lint import diagnose, load_context, load_rulebook

    p = promise(original)
    before, after = load_context(original), load_context(fixed)
    fix_findings = [f for f in diagnose(before, load_rulebook()).findings if f.fix == FIX]
    # The argmax's first stage (the op the fix narrows), in both captures.
    argmax = [c.op_timing("jit_sample", "input_reduce_fusion") for c in (before, after)]
    out = {**p, "capture": original.name, "profiled_fixed_step_us": after.step_time_us,
           "profiled_saving_us": (before.step_time_us or 0.0) - (after.step_time_us or 0.0),
           "capture_saving": capture_saving(before, after, fix_findings),
           "narrowed": [{"op": "jit_sample/input_reduce_fusion", "before_us": argmax[0].time_per_step_us,
                         "after_us": argmax[1].time_per_step_us}] if all(argmax) else []}
    if original == H200_CAPTURE:
        step_ms = p["profiled_step_us"] / 1e3
        out.update({"verify_step_ratios": list(H200_STEP_RATIOS),
                    "measured_ms_at_profiled_step": [step_ms * (1.0 - r) for r in H200_STEP_RATIOS],
                    "measured_pct": [100.0 * (1.0 - r) for r in H200_STEP_RATIOS]})
    return out


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def table(rows: list[dict[str, Any]], gpus: list[dict[str, Any]]) -> str:
    """The promised-vs-measured table, Markdown."""
    out = ["| engine (batch x vocab) | profiled step | promise | promise % | verify step base -> fixed "
           "| measured saving [95% CI] | promise / measured | promise scaled to verify's step | scaled / measured "
           "| profiled step base -> fixed | promise / profiled saving | argmax (profiled) base -> fixed "
           "| promise + argmax change / measured |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        promised_ms = r["promise_us"] / 1e3
        if "measured_ms" in r:
            lo, hi = r["measured_ms_ci"]
            b, t = r["verify_step_ms"]
            out.append(
                f"| {r['batch']} x {r['vocab']:,} | {r['profiled_step_us'] / 1e3:.1f} ms | {promised_ms:.2f} ms "
                f"| {r['promise_pct']:.1f}% | {b:.1f} -> {t:.1f} ms (x{r['step_ratio']:.3f}) "
                f"| {r['measured_ms']:.2f} ms [{lo:.2f}, {hi:.2f}] | {_ratio(promised_ms, r['measured_ms'])} "
                f"| {r['promise_scaled_ms']:.2f} ms | {_ratio(r['promise_scaled_ms'], r['measured_ms'])} "
                f"| {_profiled(r)} | {_ratio(r['promise_us'], r.get('profiled_saving_us'))} | {_narrowed(r)} "
                f"| {_ratio(r['promise_with_narrowed_us'] / 1e3, r['measured_ms'])} |")
        else:
            out.append(f"| {r['batch']} x {r['vocab']:,} | {r['profiled_step_us'] / 1e3:.1f} ms | {promised_ms:.2f} ms "
                       f"| {r['promise_pct']:.1f}% | - | - | - | - | - | - | - | - | - |")
    for gpu in gpus:
        saving = gpu["profiled_saving_us"] / 1e3
        promised_ms = gpu["promise_us"] / 1e3
        if "measured_ms_at_profiled_step" in gpu:
            lo, hi = sorted(gpu["measured_ms_at_profiled_step"])
            verify = (f"x{max(H200_STEP_RATIOS):.3f}, x{min(H200_STEP_RATIOS):.3f} (two runs) "
                      f"| {lo:.2f}-{hi:.2f} ms at the profiled step | {promised_ms / hi:.2f}-{promised_ms / lo:.2f} | - | -")
        else:
            verify = "- | - | - | - | -"
        cs = gpu["capture_saving"]
        out.append(
            f"| H200 `{gpu['capture']}` | {gpu['profiled_step_us'] / 1e3:.2f} ms | {promised_ms:.3f} ms "
            f"| {gpu['promise_pct']:.1f}% | {verify} | {_profiled(gpu, 2)}: {saving:.3f} ms saved; less the "
            f"change of untouched lines ({cs['untouched_change_us'] / 1e3:+.3f} ms): {cs['saving_us'] / 1e3:.3f} ms "
            f"| {promised_ms / saving:.2f}; {promised_ms / (cs['saving_us'] / 1e3):.2f} "
            f"| {_narrowed(gpu, 1e0, 'us')} | - |")
    return "\n".join(out)


def _profiled(r: dict[str, Any], digits: int = 1) -> str:
    if not r.get("profiled_fixed_step_us"):
        return "-"
    return f"{r['profiled_step_us'] / 1e3:.{digits}f} -> {r['profiled_fixed_step_us'] / 1e3:.{digits}f} ms"


def _narrowed(r: dict[str, Any], scale: float = 1e3, unit: str = "ms") -> str:
    parts = [f"{n['before_us'] / scale:.1f} -> {n['after_us'] / scale:.1f} {unit}" for n in r.get("narrowed", ())
             if n["before_us"] is not None and n["after_us"] is not None]
    return ", ".join(parts) or "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", default="16,32", help="comma-separated batch sizes")
    parser.add_argument("--vocab", default="32000,128000", help="comma-separated vocabulary sizes")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5, help="traced decode steps of the profile")
    parser.add_argument("--warmup", type=int, default=2, help="untraced decode steps before the trace")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_estimate")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here (default: OUT/estimate.json)")
    parser.add_argument("--no-h200", action="store_true", help="leave out the H200 capture's row")
    parser.add_argument("--rediagnose", action="store_true",
                        help="profile and verify nothing: re-read OUT's rows, the promise from their saved "
                             "profiles with the rules as they are now, verify's figures as measured")
    parser.add_argument("--programs", default="",
                        help="instead of the engine: the rules' own programs (comma-separated names of "
                             "benchmarks/promise_programs.py, or 'all'), each at three sizes, promise "
                             "(model and replay) against a direct A/B (benchmarks/promise_table.py)")
    parser.add_argument("--seconds", type=float, default=3.0, help="--programs: the direct A/B's timing time per size")
    parser.add_argument("--judge-cap", type=float, default=40.0,
                        help="--programs: the most seconds the direct A/B adds pairs for, to narrow its interval")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="--programs: measure nothing, render (and with --write-docs, write) OUT's promises.json")
    parser.add_argument("--write-docs", action="store_true", help="--programs: put the table in docs/rules.md")
    args = parser.parse_args()
    if args.programs:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from promise_programs import SIZES
        from promise_table import render, run

        if args.from_json:
            print(render(json.loads(args.from_json.read_text(encoding="utf-8")), args.write_docs))
            return 0

        names = list(SIZES) if args.programs == "all" else args.programs.split(",")
        print(run(names, args.out / "programs", args.steps, args.warmup, args.seconds, args.write_docs,
                  args.judge_cap))
        return 0
    sizes = [(int(b), int(v)) for b in args.batch.split(",") if b for v in args.vocab.split(",") if v]
    args.out.mkdir(parents=True, exist_ok=True)

    import jax
    import jaxlib

    rows: list[dict[str, Any]] = []
    path = args.json or args.out / "estimate.json"

    def write(gpus: list[dict[str, Any]]) -> None:
        doc = {"backend": jax.default_backend(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
               "settings": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "h200": gpus}
        path.write_text(json.dumps(doc, indent=1, default=str))

    if args.rediagnose:
        rows.extend(json.loads(path.read_text())["rows"])
        sizes = []
        for r in rows:
            r.update(promise(args.out / f"profile-b{r['batch']}-v{r['vocab']}"))
            change = sum(n["before_us"] - n["after_us"] for n in r.get("narrowed", ())
                         if n["before_us"] is not None and n["after_us"] is not None)
            r["promise_with_narrowed_us"] = r["recovered_us"] + change
            if "verify_step_ms" in r:
                r["promise_scaled_ms"] = (r["promise_pct"] or 0.0) / 100.0 * r["verify_step_ms"][0]
    for batch, vocab in sizes:
        print(f"batch {batch} x vocab {vocab}: profile, diagnose, verify ...", file=sys.stderr)
        rows.append(measure(batch, vocab, args, args.out))
        r = rows[-1]
        print(f"  promise {r['promise_us'] / 1e3:.2f} ms ({r['promise_pct']:.1f}% of {r['profiled_step_us'] / 1e3:.1f} ms)"
              f"; measured {r.get('measured_ms', float('nan')):.2f} ms; {r['profile_s']:.0f} + {r['verify_s']:.0f} s",
              file=sys.stderr)
        write([])  # what is done so far survives an interrupted run
    gpus = [] if args.no_h200 else [h200(), h200(*H200_SEED)]
    print(table(rows, gpus))
    write(gpus)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
