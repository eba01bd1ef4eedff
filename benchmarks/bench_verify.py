"""hlo-doctor verify at the default sizes: the fix (both variants) and the seed's two hand fixes.

In one process, against the reference engine as shipped (the baseline, captured once for the
removed-ops figure), four treatments are verified one after the other, each in its own same-session
interleaved A/B run:

- ``full``: ``bf16-greedy-sampler --variant full`` (argmax on bf16, no f32 logits without logprobs);
- ``upstream``: ``bf16-greedy-sampler --variant upstream`` (argmax on bf16, f32 logits in-graph);
- ``conditional-output-convert``: the 0.23.0 hand fix (tests/verify/seed_attempts.py);
- ``runner-convert-removed``: the 0.24.0 hand fix (tests/verify/seed_attempts.py).

Prints one table with each treatment's ratios to the baseline side by side (throughput, batch TTFT
worst/median, TPOT, decode step, compiles, the removed ops' time per step) and the checks that
failed, and writes every verify JSON/Markdown to ``--out``.

Usage::

    python benchmarks/bench_verify.py [--out DIR] [--rounds 6] [--max-tokens 16] [--batch 64] [--vocab 256000]
        [--only full,upstream,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "verify"))

TREATMENTS = ("full", "upstream", "conditional-output-convert", "runner-convert-removed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_verify")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--only", default=",".join(TREATMENTS), help="comma-separated subset of " + ", ".join(TREATMENTS))
    args = parser.parse_args()

    from seed_attempts import build_attempt

    from hlo_doctor.capture import capture_callable
    from hlo_doctor.engines import load_engine
    from hlo_doctor.fixes import patched_copy
    from hlo_doctor.render.verify import to_json as render_json
    from hlo_doctor.render.verify import to_markdown as render_markdown
    from hlo_doctor.verify import VerifySettings, engine_config, run_verify

    engine_dir = ROOT / "hlo_doctor" / "engine"
    wanted = [t for t in args.only.split(",") if t]
    unknown = sorted(set(wanted) - set(TREATMENTS))
    if unknown:
        parser.error(f"unknown treatment(s): {', '.join(unknown)}")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    common = {"rounds": args.rounds, "max_tokens": args.max_tokens, "batch": args.batch, "vocab": args.vocab}

    start = time.perf_counter()
    module = load_engine(None)
    config = engine_config(module, VerifySettings(fix="bf16-greedy-sampler", **common))  # type: ignore[arg-type]
    target = module.profile_target(config)
    print(f"capturing the baseline (batch {config.batch}, vocab {config.vocab_size}) ...", file=sys.stderr)
    baseline_run = capture_callable(target.step, steps=5, warmup=1, out_dir=out / "baseline-run",
                                    target="engine", warmup_fn=target.warmup)

    reports = {}
    for name in wanted:
        tree = out / f"tree-{name}"
        if tree.exists():
            import shutil

            shutil.rmtree(tree)
        if name in ("full", "upstream"):
            patched_copy("bf16-greedy-sampler", engine_dir, tree, variant=name)
        else:
            build_attempt(name, engine_dir, tree)
        print(f"verifying {name} ...", file=sys.stderr)
        t0 = time.perf_counter()
        report = run_verify(VerifySettings(treatment=tree, baseline_run=baseline_run, out_dir=out / f"verify-{name}",
                                           **common))  # type: ignore[arg-type]
        (out / f"verify-{name}.json").write_text(render_json(report))
        (out / f"verify-{name}.md").write_text(render_markdown(report))
        reports[name] = report
        print(f"  {name}: {'PASS' if report.passed else 'FAIL'} ({report.verdict}) in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)

    def ratio(a: float, b: float) -> str:
        return f"x{a / b:.3f}" if b else "-"

    rows: list[tuple[str, list[str]]] = []
    rows.append(("verdict", ["PASS" if r.passed else "FAIL" for r in reports.values()]))
    rows.append(("throughput ratio (median)", [f"x{r.throughput.ratio:.3f}" if r.throughput else "-"
                                               for r in reports.values()]))
    rows.append(("throughput 95% CI", [f"[{r.throughput.ci_low:.3f}, {r.throughput.ci_high:.3f}]"
                                       if r.throughput and r.throughput.tested else "-" for r in reports.values()]))
    rows.append(("throughput tok/s base -> treat", [
        f"{r.baseline.median('throughput_tok_s'):.1f} -> {r.treatment.median('throughput_tok_s'):.1f}"
        for r in reports.values()]))
    rows.append(("batch TTFT ratio (worst round)", [
        ratio(max(x.batch_ttft_ms for x in r.treatment.rounds), max(x.batch_ttft_ms for x in r.baseline.rounds))
        for r in reports.values()]))
    rows.append(("batch TTFT ratio (median)", [
        ratio(r.treatment.median("batch_ttft_ms"), r.baseline.median("batch_ttft_ms")) for r in reports.values()]))
    rows.append(("TPOT ratio (median)", [ratio(r.treatment.median("tpot_ms"), r.baseline.median("tpot_ms"))
                                         for r in reports.values()]))
    rows.append(("decode step ratio (median)", [f"x{r.step_time.ratio:.3f}" if r.step_time else "-"
                                                for r in reports.values()]))
    rows.append(("compiles in rounds (treatment)", [str(r.treatment.compiles) for r in reports.values()]))
    rows.append(("removed ops ms/step (baseline)", [
        f"{r.removed_time_per_step_us / 1000:.2f}" if r.removed_time_per_step_us else "-" for r in reports.values()]))
    rows.append(("argmax ms/step base -> treat", [
        next((f"{o.time_per_step_us / 1000:.1f} -> {o.treatment_time_per_step_us / 1000:.1f}"
              for o in r.removed_ops if o.status == "narrowed" and o.time_per_step_us
              and o.treatment_time_per_step_us is not None), "-") for r in reports.values()]))
    rows.append(("failed checks", [",".join(str(c.number) for c in r.checks if not c.passed) or "-"
                                   for r in reports.values()]))

    names = list(reports)
    width = max(len(label) for label, _ in rows)
    cols = [max(len(n), *(len(v[i]) for _, v in rows)) for i, n in enumerate(names)]
    print(" " * width + "  " + "  ".join(n.rjust(c) for n, c in zip(names, cols, strict=True)))
    for label, values in rows:
        print(label.ljust(width) + "  " + "  ".join(v.rjust(c) for v, c in zip(values, cols, strict=True)))
    for name, r in reports.items():
        for c in r.checks:
            if not c.passed:
                print(f"{name}: check {c.number} ({c.name}): {c.figure}: {c.detail[:300]}")
    summary = {name: {"passed": r.passed, "verdict": r.verdict, "checks": [c.to_dict() for c in r.checks],
                      "throughput": r.throughput.to_dict() if r.throughput else None,
                      "step_time": r.step_time.to_dict() if r.step_time else None,
                      "removed_time_per_step_us": r.removed_time_per_step_us}
               for name, r in reports.items()}
    (out / "bench_verify.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\n{len(reports)} verifications in {time.perf_counter() - start:.0f} s; artifacts in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
