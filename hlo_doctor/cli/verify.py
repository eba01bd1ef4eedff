"""CLI: ``hlo-doctor verify``: same-session A/B proof that a fix helps and stays on the precompiled menu."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.text import Text

from hlo_doctor.cli.common import (
    console,
    examples,
    handle_errors,
    print_wide,
    write_file_atomically,
    write_output,
)
from hlo_doctor.cli.progress import progress_bars
from hlo_doctor.cli.report import write_verify_report
from hlo_doctor.core.errors import ExitCode, InputError
from hlo_doctor.render.registry import VERIFY, VERIFY_TARGET
from hlo_doctor.verify import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MIN_EFFECT,
    DEFAULT_ROUNDS,
    DEFAULT_TTFT_BOUND,
    VerifyReport,
    VerifySettings,
    run_verify,
)


def write_artifacts(report: VerifyReport, out_dir: Path) -> tuple[Path, Path]:
    """``verify.json``, ``verify.md``, ``report.html`` (and ``fix.diff`` when verify made the treatment) in
    ``out_dir``."""
    json_path, md_path = out_dir / "verify.json", out_dir / "verify.md"
    write_file_atomically(json_path, VERIFY.text("json", report))
    write_file_atomically(md_path, VERIFY.text("md", report))
    write_verify_report(out_dir)
    if report.fix_diff:
        write_file_atomically(out_dir / "fix.diff", report.fix_diff)
    return json_path, md_path


@click.command("verify", epilog=examples(
    "hlo-doctor verify --fix bf16-greedy-sampler --rounds 5",
    "hlo-doctor verify --baseline ~/src/engine --treatment ~/src/engine-fixed --format md -o verify.md",
    "hlo-doctor verify --target ./tpu_inference-0.24.0 --bench 'vllm bench throughput ... --output-json {out}'",
))
@click.option("--fix", "fix", metavar="FIX", help="Bundled fix to verify (bf16-greedy-sampler): the treatment is "
              "a temporary patched copy of the baseline.")
@click.option("--variant", type=click.Choice(["full", "upstream"]), default="full", show_default=True,
              help="Variant of --fix.")
@click.option("--baseline", type=click.Path(path_type=Path), help="Baseline engine source tree "
              "[default: the bundled reference engine as shipped].")
@click.option("--treatment", type=click.Path(path_type=Path), help="Treatment engine source tree "
              "(instead of --fix).")
@click.option("--rounds", type=int, default=DEFAULT_ROUNDS, show_default=True,
              help="Measured offline batches per variant, interleaved AB BA AB...")
@click.option("--batch", type=int, help="Requests per batch [default: the engine's, 64].")
@click.option("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Tokens generated per request in each round.")
@click.option("--vocab", type=int, help="Vocabulary size [default: the engine's, 256000].")
@click.option("--logprobs", is_flag=True, help="Request logprobs; check 3 then also compares them.")
@click.option("--ttft-bound", type=float, default=DEFAULT_TTFT_BOUND, show_default=True,
              help="Largest allowed batch TTFT ratio treatment/baseline.")
@click.option("--min-effect", type=float, default=DEFAULT_MIN_EFFECT, show_default=True,
              help="Smallest relative throughput change that counts (0.02 = 2%).")
@click.option("--alpha", type=float, default=DEFAULT_ALPHA, show_default=True, help="Significance level.")
@click.option("--require-improvement", is_flag=True, help="Check 5 fails on 'no change' too.")
@click.option("--baseline-run", type=click.Path(path_type=Path), help="An existing capture of the baseline at the "
              "same sizes (hlo-doctor profile): used for the removed-ops figure instead of capturing again.")
@click.option("--format", "fmt", type=click.Choice(list(VERIFY.names)), default="table", show_default=True,
              help="table: for people (stderr); json / md: on stdout or --output.")
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the --format output to FILE.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Artifact folder: verify.json, verify.md, "
              "fix.diff, the run directories of the HLO check and the patched treatment tree.")
@click.option("--target", type=click.Path(path_type=Path), help="A tpu-inference tree (installed package, "
              "unpacked wheel, checkout): verified against a patched copy (--fix) or --treatment, at program level.")
@click.option("--steps", type=int, default=8, show_default=True, help="Sampling steps per program-level round "
              "(--target).")
@click.option("--without-compiler-options", is_flag=True, help="--target: when the release jits sample() with "
              "compiler options this backend rejects (TPU flags), jit the same body without them (noted in the report).")
@click.option("--bench", metavar="CMD", help="Serving level: a command with {tree} and {out} placeholders run on "
              "baseline and treatment in interleaved rounds; figures read from the JSON it writes at {out}.")
@click.option("--bench-metrics", metavar="NAME=KEY,...", help="JSON keys of throughput, ttft, compiles, tokens "
              "[default: vllm bench's names, then the reference engine's].")
@click.option("--bench-timeout", type=float, default=1800.0, show_default=True, help="Seconds per bench run.")
@click.option("--bench-rounds", type=int, help="Bench runs per tree [default: --rounds].")
@handle_errors
def verify_cmd(fix: str | None, variant: str, baseline: Path | None, treatment: Path | None, rounds: int,
               batch: int | None, max_tokens: int, vocab: int | None, logprobs: bool, ttft_bound: float,
               min_effect: float, alpha: float, require_improvement: bool, baseline_run: Path | None, fmt: str,
               output: Path | None, out_dir: Path | None, target: Path | None, steps: int,
               without_compiler_options: bool, bench: str | None, bench_metrics: str | None, bench_timeout: float,
               bench_rounds: int | None) -> None:
    """Measure baseline and treatment in one process and decide whether the treatment is safe and faster.

    \b
    Both engine trees are warmed up with their own precompiled menus, then measured in interleaved
    rounds (AB BA AB...) of the offline batch. Checks, each pass/fail with its figure:
      1 no compile inside any measured round (JAX's reason when there is one)
      2 batch TTFT ratio treatment/baseline <= --ttft-bound (medians; the sampler restarts cold
        before every round, so a menu miss compiles in every round)
      3 greedy tokens identical (and logprobs with --logprobs: bit-identical, f32)
      4 the treatment's own captured trace: no aliasing copy, no standalone convert program,
        argmax reads the narrow dtype (rules HD001-HD004)
      5 throughput: improved / no change / regressed / inconclusive (Mann-Whitney U, bootstrap CI)

    \b
    \b
    --target T: the real sample() of a tpu-inference tree and of its patched copy (or --treatment),
    lowered and run here, interleaved; checks 1-5 as above at program level, and 6: the precompile
    menu's dtype is the dtype the runner passes (HD006). --bench CMD adds the serving level.
    A check that could not run says why and fails.

    \b
    Exit codes: 0 every check passed, 1 a check failed, 2 bad input.
    """
    if target is not None or bench is not None:
        _verify_tree(target=target, fix=fix, variant=variant, baseline=baseline, treatment=treatment, rounds=rounds,
                     batch=batch, vocab=vocab, logprobs=logprobs, ttft_bound=ttft_bound, min_effect=min_effect,
                     alpha=alpha, steps=steps, without_compiler_options=without_compiler_options, bench=bench,
                     bench_metrics=bench_metrics, bench_timeout=bench_timeout, bench_rounds=bench_rounds,
                     fmt=fmt, output=output, out_dir=out_dir)
    if fix is not None:
        from hlo_doctor.fixes import get_fix

        get_fix(fix)  # an unknown fix is bad input before anything is loaded
    settings = VerifySettings(
        fix=fix, variant=variant, baseline=baseline, treatment=treatment, rounds=rounds, batch=batch,
        max_tokens=max_tokens, vocab=vocab, logprobs=logprobs, ttft_bound=ttft_bound, min_effect=min_effect,
        alpha=alpha, require_improvement=require_improvement, out_dir=out_dir, baseline_run=baseline_run,
    )
    with progress_bars(keep=True, label_width=34) as progress:
        report = run_verify(settings, progress=progress)
    print_wide(VERIFY.render("table", report))
    if out_dir is not None:
        json_path, md_path = write_artifacts(report, out_dir)
        console.print(Text(f"wrote {json_path} and {md_path}"), soft_wrap=True)
    if fmt != "table" or output is not None:
        # The table is for people: with --output alone, the file gets the Markdown.
        write_output(VERIFY.text("md" if fmt == "table" else fmt, report), output)
    raise SystemExit(int(ExitCode.OK if report.passed else ExitCode.FINDINGS))


def _verify_tree(*, target: Path | None, fix: str | None, variant: str, baseline: Path | None,
                 treatment: Path | None, bench: str | None, bench_metrics: str | None, fmt: str,
                 output: Path | None, out_dir: Path | None, batch: int | None, vocab: int | None,
                 **rest: Any) -> None:
    """``--target`` and/or ``--bench``: the program and serving levels; exits."""
    from hlo_doctor.verify.engine.variants import shipped_engine_dir
    from hlo_doctor.verify.tpu_inference import TargetSettings, run_target
    from hlo_doctor.verify.tpu_inference.bench import parse_metrics
    from hlo_doctor.verify.workspace import workspace

    if target is not None and baseline is not None:
        raise InputError("--target and --baseline both given", "the target is the baseline: drop --baseline")
    if fix is None and treatment is None:
        if target is None:
            raise InputError("nothing to verify: no --fix and no --treatment",
                             "pass --fix bf16-greedy-sampler, or --treatment PATH")
        fix = "bf16-greedy-sampler"
    settings = TargetSettings(
        target=target or baseline or shipped_engine_dir(), treatment=treatment, fix=fix or "bf16-greedy-sampler",
        variant=variant, batch=batch or 16, vocab=vocab or 2048, bench=bench, bench_metrics=parse_metrics(bench_metrics),
        out_dir=out_dir, **rest)
    with progress_bars(keep=True, label_width=34) as progress, workspace(out_dir) as work:
        report = run_target(settings, work, progress=progress)
        print_wide(VERIFY_TARGET.render("table", report))
        if out_dir is not None:
            (out_dir / "verify.json").write_text(VERIFY_TARGET.text("json", report))
            (out_dir / "verify.md").write_text(VERIFY_TARGET.text("md", report))
            write_verify_report(out_dir)
            if report.fix_diff:
                (out_dir / "fix.diff").write_text(report.fix_diff)
    if fmt != "table" or output is not None:
        write_output(VERIFY_TARGET.text("md" if fmt == "table" else fmt, report), output)
    raise SystemExit(int(ExitCode.OK if report.passed else ExitCode.FINDINGS))


COMMANDS = [verify_cmd]
