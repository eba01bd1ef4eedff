"""CLI: ``hlo-doctor verify``: same-session A/B proof that a fix helps and stays on the precompiled menu."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from hlo_doctor.cli.common import console, examples, handle_errors, write_file_atomically, write_output
from hlo_doctor.cli.progress import progress_bars
from hlo_doctor.core.errors import ExitCode
from hlo_doctor.core.format import fmt_ms as fmt_us
from hlo_doctor.render.verify import metric_rows
from hlo_doctor.render.verify import to_json as render_json
from hlo_doctor.render.verify import to_markdown as render_markdown
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


def print_report(report: VerifyReport) -> None:
    """The people's view on stderr: checks first (they decide), then the measured table."""
    colour = "green" if report.passed else "red"
    status = "PASS" if report.passed else "FAIL"
    console.print(Text(f"verify: {status} ({report.verdict})", style=f"bold {colour}"))
    checks = Table(show_edge=False, pad_edge=False, box=None)
    for col in ("#", "check", "result", "figure"):
        checks.add_column(col, overflow="fold")
    for c in report.checks:
        checks.add_row(str(c.number), Text(c.name), Text("pass", style="green") if c.passed else Text("FAIL", style="bold red"),
                       Text(c.figure))
    console.print(checks)
    for c in report.checks:
        if not c.passed and c.detail:
            console.print(Text(f"  check {c.number}: {c.detail}", style="red"), soft_wrap=True)
    # No box: the table must fit an 80-column CI log without wrapping its rows.
    table = Table(title=None, box=None, pad_edge=False, header_style="bold")
    for col, justify in (("median", "left"), ("baseline", "right"), ("treatment", "right"), ("ratio", "right"),
                         ("95% CI", "left"), ("outcome", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in metric_rows(report):
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    for op in report.removed_ops:
        now = "" if op.status == "gone" else f" ({fmt_us(op.treatment_time_per_step_us)}/step)"
        console.print(Text(f"  {op.code} {op.module}/{op.op} {op.shape}: {fmt_us(op.time_per_step_us)}/step in "
                           f"baseline, {op.status} in treatment{now}", style="dim"), soft_wrap=True)
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))


def write_artifacts(report: VerifyReport, out_dir: Path) -> tuple[Path, Path]:
    """``verify.json`` and ``verify.md`` (and ``fix.diff`` when verify made the treatment) in ``out_dir``."""
    json_path, md_path = out_dir / "verify.json", out_dir / "verify.md"
    write_file_atomically(json_path, render_json(report))
    write_file_atomically(md_path, render_markdown(report))
    if report.fix_diff:
        write_file_atomically(out_dir / "fix.diff", report.fix_diff)
    return json_path, md_path


@click.command("verify", epilog=examples(
    "hlo-doctor verify --fix bf16-greedy-sampler --rounds 5",
    "hlo-doctor verify --baseline ~/src/engine --treatment ~/src/engine-fixed --format md -o verify.md",
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
@click.option("--format", "fmt", type=click.Choice(["table", "json", "md"]), default="table", show_default=True,
              help="table: for people (stderr); json / md: on stdout or --output.")
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write the --format output to FILE.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Artifact folder: verify.json, verify.md, "
              "fix.diff, the run directories of the HLO check and the patched treatment tree.")
@handle_errors
def verify_cmd(fix: str | None, variant: str, baseline: Path | None, treatment: Path | None, rounds: int,
               batch: int | None, max_tokens: int, vocab: int | None, logprobs: bool, ttft_bound: float,
               min_effect: float, alpha: float, require_improvement: bool, baseline_run: Path | None, fmt: str, output: Path | None,
               out_dir: Path | None) -> None:
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
    Exit codes: 0 every check passed, 1 a check failed, 2 bad input.
    """
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
    print_report(report)
    if out_dir is not None:
        json_path, md_path = write_artifacts(report, out_dir)
        console.print(Text(f"wrote {json_path} and {md_path}"), soft_wrap=True)
    if fmt == "json":
        write_output(render_json(report), output)
    elif fmt == "md":
        write_output(render_markdown(report), output)
    elif output is not None:
        write_output(render_markdown(report), output)
    raise SystemExit(int(ExitCode.OK if report.passed else ExitCode.FINDINGS))


COMMANDS = [verify_cmd]
