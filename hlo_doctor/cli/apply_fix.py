"""CLI: ``hlo-doctor apply-fix FIX --target PATH`` - apply, dry-run or revert a bundled source fix.

Exit codes: 0 applied / already applied / not affected / reverted / dry run; 1 the tree is half-fixed
and ``--complete`` was not given (the diagnosis is printed); 2 the code does not match (anchors listed),
or bad input (not a directory, unknown project, read-only file); 3 internal error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from hlo_doctor.cli.common import (
    FormatChoice,
    console,
    examples,
    handle_errors,
    output_option,
    print_wide,
    write_output,
)
from hlo_doctor.core.errors import ExitCode
from hlo_doctor.fixes import (
    FixApplied,
    FixRefused,
    FixResult,
    FixSkipped,
    apply_fix,
    available_fixes,
    revert_fix,
)

_STATE_STYLE = {"original": "yellow", "fixed": "green", "missing": "red"}


def _exit_code(result: FixResult) -> int:
    if isinstance(result, FixRefused):
        return int(ExitCode.FINDINGS) if result.kind == "half-fixed" else int(ExitCode.USAGE)
    return int(ExitCode.OK)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it (shorter to read)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _print_summary(result: FixResult, show_diff: bool) -> None:
    console.print(f"[bold]{escape(result.fix_id)}[/] on {escape(result.target_kind)}, release [bold]{escape(result.release)}[/]")
    if result.recovered:
        console.print(f"[yellow]recovered:[/] {escape(result.recovered)}", soft_wrap=True)
    if result.elements:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("part", justify="right")
        table.add_column("element", max_width=40)
        table.add_column("found", no_wrap=True)
        table.add_column("where", min_width=20, overflow="fold")
        for element in result.elements:
            style = _STATE_STYLE.get(element.state, "")
            table.add_row(str(element.part), escape(element.title), f"[{style}]{escape(element.state)}[/]", escape(element.where))
        print_wide(table)
    if isinstance(result, FixApplied):
        verb = "reverted" if result.reverted else ("would change" if result.dry_run else "changed")
        console.print(f"[green]{verb}[/] {len(result.files)} file(s):")
        for path in result.files:
            console.print(f"  {escape(_shown(path))}")
        if not result.reverted:
            console.print(f"parts applied: {', '.join(str(p) for p in result.parts_applied) or 'none'} "
                          f"(variant {escape(result.variant)})")
        for note in result.notes:
            console.print(f"[dim]note:[/] {escape(note)}")
        if result.manifest_path is not None:
            console.print(f"manifest: {escape(_shown(result.manifest_path))} (revert with --revert)")
        if show_diff and result.diff:
            console.print(Syntax(result.diff, "diff", theme="ansi_dark", word_wrap=True))
    elif isinstance(result, FixSkipped):
        console.print(f"[green]{escape(result.kind)}[/]: {escape(result.reason)}")
    else:
        if result.kind == "half-fixed":
            console.print(f"[bold yellow]{escape(result.reason)}[/]", soft_wrap=True)
        else:
            console.print(f"[bold red]refused ({escape(result.kind)}):[/] {escape(result.reason)}", soft_wrap=True)
        for anchor in result.missing_anchors:
            console.print(f"  [red]not found:[/] {escape(anchor)}", soft_wrap=True)


JSON_SCHEMA = "hlo-doctor.apply-fix/1"


@click.command("apply-fix", epilog=examples(
    "hlo-doctor apply-fix bf16-greedy-sampler --target .venv/lib/python3.12/site-packages/tpu_inference --dry-run",
    "hlo-doctor apply-fix bf16-greedy-sampler --target ~/src/tpu-inference --format json -o fix.json",
    "hlo-doctor apply-fix bf16-greedy-sampler --target ~/src/tpu-inference --revert",
))
@click.argument("fix_id", metavar="FIX", type=click.Choice(list(available_fixes())))
@click.option("--target", "target", required=True, type=click.Path(path_type=Path),
              help="tpu_inference package dir, tpu-inference checkout, unpacked wheel, or the engine's source tree.")
@click.option("--dry-run", is_flag=True, help="Print the unified diff; change nothing.")
@click.option("--revert", is_flag=True, help="Restore the exact bytes recorded by an earlier apply.")
@click.option("--variant", type=click.Choice(["full", "upstream"]), default="full", show_default=True,
              help="upstream: the upstream contract; full: also no float32 logits from sample() without logprobs.")
@click.option("--complete", is_flag=True, help="Finish a half-fixed tree instead of stopping with a diagnosis.")
@click.option("--format", "fmt", type=FormatChoice(["table", "json"], {"text": "table"}), default="table",
              show_default=True, help="table: summary for people on stderr (and the diff on stdout on a dry "
                                      "run); json: machine output on stdout or --output.")
@output_option("Write the machine output (json, or a dry run's diff) to FILE ('-': stdout).")
@handle_errors
def apply_fix_cmd(
    fix_id: str,
    target: Path,
    dry_run: bool,
    revert: bool,
    variant: str,
    complete: bool,
    fmt: str,
    output: Path | None,
) -> None:
    """Apply a bundled source fix to a tpu-inference tree or the reference engine, as one transaction.

    \b
    Fixes: bf16-greedy-sampler (runner widening, sampler output, precompile menu rekeyed).
    Exit codes: 0 applied / already applied / not affected / reverted; 1 half-fixed (use --complete);
    2 the code does not match (anchors listed) or bad input; 3 internal error.
    """
    if revert and (dry_run or complete):
        raise click.UsageError("--revert cannot be combined with --dry-run or --complete")
    if revert:
        result = revert_fix(fix_id, target)
    else:
        result = apply_fix(fix_id, target, variant=variant, dry_run=dry_run, complete=complete)
    _print_summary(result, show_diff=False)
    if fmt == "json":
        write_output(json.dumps({"schema": JSON_SCHEMA, **result.to_dict()}, indent=2) + "\n", output)
    elif isinstance(result, FixApplied) and result.dry_run:
        # The diff is the product of a dry run: plain text on stdout, pipeable into `patch -p1`.
        write_output(result.diff, output)
    sys.exit(_exit_code(result))


COMMANDS = [apply_fix_cmd]
