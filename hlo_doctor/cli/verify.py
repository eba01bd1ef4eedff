"""CLI: ``hlo-doctor verify``: same-session A/B proof that a fix helps and stays on the precompiled menu.

Three kinds of target: two engine trees (the default: the bundled reference engine and a patched
copy), a tpu-inference tree (``--target``), and any program (``verify FILE.py:FUNC``). The module
imports only click and the CLI's own light modules: the kinds of target (JAX, numpy, scipy, libcst)
are imported when the command runs, so that ``--help`` and the other commands start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from hlo_doctor.cli.common import (
    console,
    examples,
    handle_errors,
    print_wide,
    write_file_atomically,
    write_output,
)
from hlo_doctor.core.errors import ExitCode, InputError

if TYPE_CHECKING:
    from hlo_doctor.verify import VerifyReport

FORMATS = ("table", "json", "md", "junit")
"""--format's names; junit is for program targets (the registry's ``verify-program`` subject)."""
# The defaults --help shows, as the verify core defines them (tests/verify/test_verify_program_cli.py
# holds them equal): written here so that --help does not import the core.
DEFAULT_ROUNDS, DEFAULT_TTFT_BOUND, DEFAULT_MIN_EFFECT, DEFAULT_ALPHA, DEFAULT_MAX_TOKENS = 6, 1.25, 0.02, 0.05, 16
PROGRAM_STEPS, TARGET_STEPS = 10, 8


def write_artifacts(report: VerifyReport, out_dir: Path) -> tuple[Path, Path]:
    """``verify.json``, ``verify.md``, ``report.html`` (and ``fix.diff`` when verify made the treatment) in
    ``out_dir``."""
    from hlo_doctor.cli.report import write_verify_report
    from hlo_doctor.render.registry import VERIFY

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
    "hlo-doctor verify decode.py:step --fix eager-widening          # any program, against a fixed copy",
    "hlo-doctor verify decode.py:step --treatment decode_v2.py:step --rtol 1e-6 --format junit -o verify.xml",
))
@click.argument("program", metavar="[TARGET]", required=False)
@click.option("--fix", "fix", metavar="FIX", help="Fix to verify: the treatment is a temporary fixed copy (of the "
              "bundled engine: bf16-greedy-sampler; of TARGET's file: a file fix of the catalog, "
              "hlo-doctor apply-fix --list).")
@click.option("--fix-line", type=int, metavar="LINE", help="TARGET: apply --fix at this line of TARGET's file "
              "[default: the lines the baseline's own findings name, from a capture taken first].")
@click.option("--fix-arg", metavar="NAME", default="", help="TARGET: the argument a finding names (donate-state: "
              "the state to donate), as apply-fix --arg.")
@click.option("--variant", type=click.Choice(["full", "upstream"]), default="full", show_default=True,
              help="Variant of --fix (engine and --target).")
@click.option("--baseline", type=click.Path(path_type=Path), help="Baseline engine source tree "
              "[default: the bundled reference engine as shipped].")
@click.option("--treatment", metavar="PATH|B.py:FUNC", help="Treatment engine source tree (instead of --fix); "
              "with TARGET: another target, B.py:FUNC.")
@click.option("--rounds", type=int, help=f"Measured rounds per variant, interleaved AB BA AB...  [default: "
              f"{DEFAULT_ROUNDS}]")
@click.option("--batch", type=int, help="Requests per batch [default: the engine's, 64].")
@click.option("--max-tokens", type=int, help=f"Tokens generated per request in each round.  [default: "
              f"{DEFAULT_MAX_TOKENS}]")
@click.option("--vocab", type=int, help="Vocabulary size [default: the engine's, 256000].")
@click.option("--logprobs", is_flag=True, help="Request logprobs; check 3 then also compares them.")
@click.option("--ttft-bound", type=float, help=f"Largest allowed batch TTFT ratio treatment/baseline.  [default: "
              f"{DEFAULT_TTFT_BOUND}]")
@click.option("--min-effect", type=float, help=f"Smallest relative change of the step that counts (0.02 = 2%).  [default: "
              f"{DEFAULT_MIN_EFFECT}]")
@click.option("--alpha", type=float, help=f"Significance level.  [default: {DEFAULT_ALPHA}]")
@click.option("--require-improvement", is_flag=True, help="The verdict fails on 'no change' too.")
@click.option("--budget", "budget_s", type=float, metavar="SECONDS", help="After --rounds, add pairs of rounds until "
              "the step-time verdict decides or the measured rounds have taken SECONDS (engine and TARGET).")
@click.option("--baseline-run", type=click.Path(path_type=Path), help="An existing capture of the baseline at the "
              "same sizes (hlo-doctor profile): used for the removed-ops figure instead of capturing again.")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="table", show_default=True,
              help="table: for people (stderr); json / md (/ junit with TARGET): on stdout or --output.")
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the --format output to FILE.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Artifact folder: verify.json, verify.md, "
              "report.html, fix.diff, the run directories of the HLO check and the patched treatment tree.")
@click.option("--target", type=click.Path(path_type=Path), help="A tpu-inference tree (installed package, "
              "unpacked wheel, checkout): verified against a patched copy (--fix) or --treatment, at program level.")
@click.option("--steps", type=int, help=f"Calls per round: sampling steps of --target [default: {TARGET_STEPS}], "
              f"step calls of TARGET [default: {PROGRAM_STEPS}].")
@click.option("--warmup", type=int, default=2, show_default=True, help="TARGET: untimed calls of each side first.")
@click.option("--rtol", type=float, default=0.0, show_default=True, help="TARGET: outputs equal within "
              "|a-b| <= atol + rtol*|b| (floats only; 0 and 0: bit for bit).")
@click.option("--atol", type=float, default=0.0, show_default=True, help="TARGET: see --rtol.")
@click.option("--rules", metavar="CODES", help="TARGET: rules whose findings the treatment must not have "
              "[default: the fix's rules; with --treatment, no finding the baseline did not have].")
@click.option("--without-compiler-options", is_flag=True, help="--target: when the release jits sample() with "
              "compiler options this backend rejects (TPU flags), jit the same body without them (noted in the report).")
@click.option("--bench", metavar="CMD", help="Serving level: a command with {tree} and {out} placeholders run on "
              "baseline and treatment in interleaved rounds; figures read from the JSON it writes at {out}.")
@click.option("--bench-metrics", metavar="NAME=KEY,...", help="JSON keys of throughput, ttft, compiles, tokens "
              "[default: vllm bench's names, then the reference engine's].")
@click.option("--bench-timeout", type=float, default=1800.0, show_default=True, help="Seconds per bench run.")
@click.option("--bench-rounds", type=int, help="Bench runs per tree [default: --rounds].")
@handle_errors
def verify_cmd(program: str | None, fix: str | None, fix_line: int | None, fix_arg: str, variant: str, baseline: Path | None, treatment: str | None,
               rounds: int | None, batch: int | None, max_tokens: int | None, vocab: int | None, logprobs: bool,
               ttft_bound: float | None, min_effect: float | None, alpha: float | None, require_improvement: bool,
               budget_s: float | None, baseline_run: Path | None, fmt: str, output: Path | None, out_dir: Path | None, target: Path | None,
               steps: int | None, warmup: int, rtol: float, atol: float, rules: str | None,
               without_compiler_options: bool, bench: str | None, bench_metrics: str | None, bench_timeout: float,
               bench_rounds: int | None) -> None:
    """Measure baseline and treatment in one process and decide whether the treatment is safe and faster.

    \b
    Both engine trees are warmed up with their own precompiled menus, then measured in interleaved
    rounds (AB BA AB...) of the offline batch. Checks, each pass/fail with its figure:
      1 no compile inside any measured round (JAX's reason when there is one)
      2 batch TTFT ratio treatment/baseline <= --ttft-bound (each side's fastest round; the
        sampler restarts cold before every round, so a menu miss compiles in every round)
      3 greedy tokens identical (and logprobs with --logprobs: bit-identical, f32)
      4 the treatment's own captured trace: no aliasing copy, no standalone convert program,
        argmax reads the narrow dtype (rules HD001-HD004)
      5 step-time verdict: improved / no change / regressed / inconclusive on the decode steps,
        each round's trimmed mean compared within its AB/BA pair, t-test over the pairs; the
        per-round throughput must not regress

    \b
    TARGET (FILE.py:FUNC or package.module:FUNC, as for profile: func() runs one step and returns
    JAX arrays) against a copy of its file with --fix FIX applied (the file itself is only read), or
    against --treatment B.py:FUNC. Both are warmed, then called --steps times per round, interleaved:
      1 no compile inside any measured round
      2 outputs of every call identical, bit for bit (or within --rtol/--atol); a difference or a
        step that raises fails, naming the round, the call and the first differing element
      3 every rule on each side's capture: none of the fix's rules (or --rules) finds anything in
        the treatment; the figure says which findings remain, and the ops that no longer run
      4 step-time verdict with its CI (rounds as blocks; --budget adds rounds until it decides)
    --rounds below what the statistics need is refused before anything runs.

    \b
    --target T: the real sample() of a tpu-inference tree and of its patched copy (or --treatment),
    lowered and run here, interleaved; checks 1-5 as above at program level, and 6: the precompile
    menu's dtype is the dtype the runner passes (HD006). --bench CMD adds the serving level.
    A check that could not run says why and fails.

    \b
    Exit codes: 0 every check passed, 1 a check failed, 2 bad input.
    """
    if program is not None:
        for name, given in (("--baseline", baseline), ("--target", target), ("--bench", bench),
                            ("--baseline-run", baseline_run)):
            if given is not None:
                raise InputError(f"TARGET {program} and {name} both given", f"{name} is for engine trees: drop it")
        _verify_program(program=program, treatment=treatment, fix=fix, fix_line=fix_line, fix_arg=fix_arg, rounds=rounds, steps=steps, warmup=warmup,
                        rtol=rtol, atol=atol, rules=rules, min_effect=min_effect, alpha=alpha,
                        require_improvement=require_improvement, budget_s=budget_s, fmt=fmt, output=output, out_dir=out_dir)
    if fmt == "junit":
        raise InputError("--format junit is for verify TARGET (a program)", "use --format json or md here")
    if fix_line is not None or fix_arg:
        raise InputError("--fix-line/--fix-arg are for verify TARGET (a program)", "drop them")
    from hlo_doctor.verify import settings as core

    n = rounds if rounds is not None else core.DEFAULT_ROUNDS
    bound = ttft_bound if ttft_bound is not None else core.DEFAULT_TTFT_BOUND
    effect = min_effect if min_effect is not None else core.DEFAULT_MIN_EFFECT
    level = alpha if alpha is not None else core.DEFAULT_ALPHA
    treatment_dir = Path(treatment) if treatment is not None else None
    if target is not None or bench is not None:
        if budget_s is not None:
            raise InputError("--budget is for the engine A/B and verify TARGET", "drop --budget with --target/--bench")
        _verify_tree(target=target, fix=fix, variant=variant, baseline=baseline, treatment=treatment_dir,
                     batch=batch, vocab=vocab, logprobs=logprobs, steps=steps if steps is not None else TARGET_STEPS,
                     without_compiler_options=without_compiler_options, bench=bench, bench_metrics=bench_metrics,
                     bench_timeout=bench_timeout, bench_rounds=bench_rounds, fmt=fmt, output=output, out_dir=out_dir,
                     rounds=n, ttft_bound=bound, min_effect=effect, alpha=level)
    _verify_engine(fix=fix, variant=variant, baseline=baseline, treatment=treatment_dir, batch=batch,
                   max_tokens=max_tokens, vocab=vocab, logprobs=logprobs, require_improvement=require_improvement,
                   budget_s=budget_s, baseline_run=baseline_run, fmt=fmt, output=output, out_dir=out_dir, rounds=n,
                   ttft_bound=bound, min_effect=effect, alpha=level)


def _verify_engine(*, fix: str | None, variant: str, baseline: Path | None, treatment: Path | None, rounds: int,
                   batch: int | None, max_tokens: int | None, vocab: int | None, logprobs: bool, ttft_bound: float,
                   min_effect: float, alpha: float, require_improvement: bool, budget_s: float | None,
                   baseline_run: Path | None, fmt: str, output: Path | None, out_dir: Path | None) -> None:
    """Two engine trees (the default): exits."""
    from rich.text import Text

    from hlo_doctor.cli.progress import progress_bars
    from hlo_doctor.render.registry import VERIFY
    from hlo_doctor.verify import DEFAULT_MAX_TOKENS as MAX_TOKENS
    from hlo_doctor.verify import VerifySettings, run_verify

    if fix is not None:
        from hlo_doctor.fixes import get_fix

        get_fix(fix)  # an unknown fix is bad input before anything is loaded
    settings = VerifySettings(
        fix=fix, variant=variant, baseline=baseline, treatment=treatment, rounds=rounds, batch=batch,
        max_tokens=max_tokens if max_tokens is not None else MAX_TOKENS, vocab=vocab, logprobs=logprobs,
        ttft_bound=ttft_bound, min_effect=min_effect, alpha=alpha, require_improvement=require_improvement,
        out_dir=out_dir, baseline_run=baseline_run, budget_s=budget_s,
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


def _verify_program(*, program: str, treatment: str | None, fix: str | None, fix_line: int | None, fix_arg: str,
                    rounds: int | None,
                    steps: int | None, warmup: int, rtol: float, atol: float, rules: str | None,
                    min_effect: float | None, alpha: float | None, require_improvement: bool,
                    budget_s: float | None, fmt: str, output: Path | None, out_dir: Path | None) -> None:
    """``verify TARGET``: a program against a fixed copy of its file or another target; exits."""
    from rich.text import Text

    from hlo_doctor.capture_guard import sigterm_as_interrupt, stdout_to_stderr
    from hlo_doctor.cli.progress import progress_bars
    from hlo_doctor.cli.report import write_verify_report
    from hlo_doctor.render.registry import VERIFY_PROGRAM
    from hlo_doctor.verify import settings as core
    from hlo_doctor.verify.program import ProgramSettings, run_program, validate_program_settings

    settings = ProgramSettings(
        baseline=program, treatment=treatment, fix=fix, fix_line=fix_line, fix_arg=fix_arg,
        rounds=rounds if rounds is not None else core.DEFAULT_ROUNDS,
        steps=steps if steps is not None else PROGRAM_STEPS, warmup=warmup, rtol=rtol, atol=atol,
        rules=tuple(c.strip().upper() for c in (rules or "").split(",") if c.strip()),
        min_effect=min_effect if min_effect is not None else core.DEFAULT_MIN_EFFECT,
        alpha=alpha if alpha is not None else core.DEFAULT_ALPHA, require_improvement=require_improvement,
        budget_s=budget_s, out_dir=out_dir)
    validate_program_settings(settings)  # before any progress display: a refusal is one line
    # What the targets print goes to stderr: stdout is the --format output.
    with stdout_to_stderr(), sigterm_as_interrupt(), progress_bars(keep=True, label_width=34) as progress:
        report = run_program(settings, progress=progress)
    print_wide(VERIFY_PROGRAM.render("table", report))
    if out_dir is not None:
        written = [out_dir / "verify.json", out_dir / "verify.md"]
        write_file_atomically(written[0], VERIFY_PROGRAM.text("json", report))
        write_file_atomically(written[1], VERIFY_PROGRAM.text("md", report))
        written.append(write_verify_report(out_dir))
        if report.fix_diff:
            write_file_atomically(out_dir / "fix.diff", report.fix_diff)
        console.print(Text(f"wrote {written[0]}, {written[1]} and {written[2]}"), soft_wrap=True)
    if fmt != "table" or output is not None:
        write_output(VERIFY_PROGRAM.text("md" if fmt == "table" else fmt, report), output)
    raise SystemExit(int(ExitCode.OK if report.passed else ExitCode.FINDINGS))


def _verify_tree(*, target: Path | None, fix: str | None, variant: str, baseline: Path | None,
                 treatment: Path | None, bench: str | None, bench_metrics: str | None, fmt: str,
                 output: Path | None, out_dir: Path | None, batch: int | None, vocab: int | None, rounds: int,
                 steps: int, logprobs: bool, ttft_bound: float, min_effect: float, alpha: float,
                 without_compiler_options: bool, bench_timeout: float, bench_rounds: int | None) -> None:
    """``--target`` and/or ``--bench``: the program and serving levels; exits."""
    from hlo_doctor.cli.progress import progress_bars
    from hlo_doctor.cli.report import write_verify_report
    from hlo_doctor.render.registry import VERIFY_TARGET
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
        out_dir=out_dir, rounds=rounds, steps=steps, logprobs=logprobs, ttft_bound=ttft_bound, min_effect=min_effect,
        alpha=alpha, without_compiler_options=without_compiler_options, bench_timeout=bench_timeout,
        bench_rounds=bench_rounds)
    with progress_bars(keep=True, label_width=34) as progress, workspace(out_dir) as work:
        report = run_target(settings, work, progress=progress)
        print_wide(VERIFY_TARGET.render("table", report))
        if out_dir is not None:
            write_file_atomically(out_dir / "verify.json", VERIFY_TARGET.text("json", report))
            write_file_atomically(out_dir / "verify.md", VERIFY_TARGET.text("md", report))
            write_verify_report(out_dir)
            if report.fix_diff:
                write_file_atomically(out_dir / "fix.diff", report.fix_diff)
    if fmt != "table" or output is not None:
        write_output(VERIFY_TARGET.text("md" if fmt == "table" else fmt, report), output)
    raise SystemExit(int(ExitCode.OK if report.passed else ExitCode.FINDINGS))


COMMANDS = [verify_cmd]
