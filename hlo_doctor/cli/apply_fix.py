"""CLI: ``hlo-doctor apply-fix`` - apply, dry-run or revert a fix: on one file, on a project, or from a run.

Three forms: ``apply-fix FIX FILE.py[:LINE]`` (a file fix of the catalog, at a line or wherever the
file holds its pattern), ``apply-fix FIX --target PATH`` (a project fix: ``bf16-greedy-sampler``),
``apply-fix --from RUN`` (every finding of a diagnosis that carries a fix). A file fix, and
``--from``, show the diff and change nothing when standard output is not a terminal, unless
``--write``. Exit codes: 0 applied / already applied / not affected / reverted / dry run; 1 the
project is half-fixed and ``--complete`` was not given; 2 the code does not match (the line changed
since the run, the call is not a jax.jit, the argument is read later: the reason is printed, nothing
is changed), an unsafe fix without ``--unsafe``, or bad input; 3 internal error.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from hlo_doctor.cli.common import (
    FormatChoice,
    console,
    examples,
    handle_errors,
    output_option,
    print_wide,
    write_output,
)
from hlo_doctor.core.errors import ExitCode, InputError
from hlo_doctor.core.lookup import repository_root

if TYPE_CHECKING:
    # The fixes (and the views of their outcomes) are imported by the code paths that apply them.
    from rich.table import Table

    from hlo_doctor.core.model import Finding
    from hlo_doctor.fixes import FixResult
    from hlo_doctor.fixes.source.from_run import FromRun

JSON_SCHEMA = "hlo-doctor.apply-fix/1"


def _exit_code(result: FixResult) -> int:
    from hlo_doctor.fixes import FixRefused

    if isinstance(result, FixRefused):
        return int(ExitCode.FINDINGS) if result.kind == "half-fixed" else int(ExitCode.USAGE)
    return int(ExitCode.OK)


def _file_and_line(spec: str) -> tuple[Path, int | None]:
    """``FILE.py:LINE`` -> (FILE.py, LINE); a path without a line -> (path, None)."""
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isdigit() and head and not Path(spec).exists():
        return Path(head), int(tail)
    return Path(spec), None


def _finish(result: FixResult, fmt: str, output: Path | None) -> None:
    from hlo_doctor.cli.apply_fix_views import print_summary
    from hlo_doctor.fixes import FixApplied

    print_summary(result)
    if fmt == "json":
        write_output(json.dumps({"schema": JSON_SCHEMA, **result.to_dict()}, indent=2) + "\n", output)
    elif isinstance(result, FixApplied) and result.dry_run:
        # The diff is the product of a dry run: plain text on stdout, pipeable into `patch -p1`.
        write_output(result.diff, output)
    sys.exit(_exit_code(result))


def _catalog_table() -> Table:
    from rich.table import Table

    from hlo_doctor.fixes.catalog import CATALOG

    t = Table(header_style="bold", box=None, pad_edge=False)
    for col in ("fix", "safety", "rules", "edits"):
        t.add_column(col, no_wrap=True)
    t.add_column("what it does", overflow="fold")
    for e in CATALOG:
        t.add_row(e.fix_id, e.safety, ", ".join(e.rules), "a project (--target)" if e.scope == "tree" else "a file",
                  e.summary)
    return t


def _created(run: Path) -> float | None:
    """When the run was taken (run.json's ``created``), else the input's own time."""
    doc = run / "run.json"
    try:
        if doc.is_file():
            created = json.loads(doc.read_text(encoding="utf-8")).get("created")
            if created:
                return _dt.datetime.fromisoformat(str(created)).timestamp()
        return run.stat().st_mtime
    except (OSError, ValueError):
        return None


def _findings(run: Path, root: Path) -> list[Finding]:
    """The findings of ``run``: a ``diagnose --format json`` file, or any input ``diagnose`` reads."""
    from hlo_doctor.fixes.source.applicable import with_applicable_fixes
    from hlo_doctor.fixes.source.from_run import finding_from_dict

    if run.is_file() and run.suffix == ".json":
        try:
            doc = json.loads(run.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{run} is not a diagnosis JSON ({exc})", "pass diagnose --format json output or a run") from exc
        if isinstance(doc, dict) and isinstance(doc.get("findings"), list):
            return [finding_from_dict(d) for d in doc["findings"] if isinstance(d, dict)]
    from hlo_doctor.cli.common import announce_capture
    from hlo_doctor.lint import diagnose, load_context, load_rulebook

    say_capture = announce_capture(run)
    ctx = load_context(run)
    say_capture()
    result = diagnose(ctx, load_rulebook(()))
    return list(with_applicable_fixes(result.findings, root))


def _from_run(run: Path, root: Path, unsafe: bool, dry_run: bool, fmt: str, output: Path | None) -> None:
    from hlo_doctor.cli.apply_fix_views import print_from_run
    from hlo_doctor.fixes.source.from_run import apply_from_findings

    findings = _findings(run, root)
    outcome: FromRun = apply_from_findings(findings, root, unsafe=unsafe, dry_run=dry_run, created=_created(run))
    print_from_run(outcome)
    if fmt == "json":
        write_output(json.dumps({"schema": JSON_SCHEMA, **outcome.to_dict()}, indent=2) + "\n", output)
    elif dry_run and outcome.diff:
        write_output(outcome.diff, output)
    sys.exit(int(ExitCode.USAGE) if outcome.refused else int(ExitCode.OK))


@click.command("apply-fix", epilog=examples(
    "hlo-doctor apply-fix donate-state decode.py:41 --dry-run      # the diff, nothing written",
    "hlo-doctor apply-fix donate-state sampler.py:160 --arg state --write",
    "hlo-doctor apply-fix eager-widening sampler.py --write         # every place in the file",
    "hlo-doctor apply-fix donate-state decode.py --revert",
    "hlo-doctor apply-fix --from runs/decode --unsafe --write       # every fixable finding of a run",
    "hlo-doctor apply-fix bf16-greedy-sampler --target ~/src/tpu-inference --format json -o fix.json",
    "hlo-doctor apply-fix --list",
))
@click.argument("fix_id", metavar="[FIX]", required=False)
@click.argument("file", metavar="[FILE.py[:LINE]]", required=False)
@click.option("--target", "target", type=click.Path(path_type=Path), default=None,
              help="Project fixes: the tpu_inference package dir, checkout, unpacked wheel, or the engine's tree.")
@click.option("--from", "from_run", type=click.Path(path_type=Path), default=None, metavar="RUN",
              help="Apply every fixable finding of RUN (a run directory, any diagnose input, or diagnose's JSON).")
@click.option("--dry-run", is_flag=True, help="Print the unified diff; change nothing.")
@click.option("--write", is_flag=True, help="File fixes and --from: write even when stdout is not a terminal.")
@click.option("--unsafe", is_flag=True, help="Also apply unsafe fixes (outputs may differ: run verify after).")
@click.option("--arg", "argument", default="", metavar="NAME",
              help="donate-state at a line: the argument to donate (a finding names it; default: the arguments "
                   "every call rebinds from the result).")
@click.option("--revert", is_flag=True, help="Restore the exact bytes recorded by an earlier apply.")
@click.option("--source-root", "source_root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="--from: the project whose files may be changed [default: the repository root].")
@click.option("--variant", type=click.Choice(["full", "upstream"]), default="full", show_default=True,
              help="bf16-greedy-sampler: upstream contract, or also no float32 logits from sample() without logprobs.")
@click.option("--complete", is_flag=True, help="Project fixes: finish a half-fixed tree instead of stopping.")
@click.option("--list", "list_fixes", is_flag=True, help="List the fixes (id, safe or unsafe, rules, what they edit).")
@click.option("--format", "fmt", type=FormatChoice(["table", "json"], {"text": "table"}), default="table",
              show_default=True, help="table: summary for people on stderr (and the diff on stdout on a dry "
                                      "run); json: machine output on stdout or --output.")
@output_option("Write the machine output (json, or a dry run's diff) to FILE ('-': stdout).")
@handle_errors
def apply_fix_cmd(
    fix_id: str | None, file: str | None, target: Path | None, from_run: Path | None, dry_run: bool, write: bool,
    unsafe: bool, argument: str, revert: bool, source_root: Path | None, variant: str, complete: bool, list_fixes: bool, fmt: str,
    output: Path | None,
) -> None:
    """Apply a fix to a file, a project, or every fixable finding of a run, as one transaction each.

    \b
    File fixes (FIX FILE.py[:LINE]): donate-state, eager-widening, argmax-without-softmax,
    slice-before-matmul. Project fix (FIX --target PATH): bf16-greedy-sampler.
    Safe fixes compute the same values by construction; unsafe ones need --unsafe (and a verify).
    Exit codes: 0 applied / already applied / reverted / dry run; 1 half-fixed project (use
    --complete); 2 the code does not match, an unsafe fix without --unsafe, or bad input; 3 internal error.
    """
    # Imported here, not with the module: --help and the other commands start without them.
    from hlo_doctor.fixes import FixRefused, apply_fix, revert_fix
    from hlo_doctor.fixes.catalog import catalog_entry
    from hlo_doctor.fixes.source.apply import apply_source_fix, revert_source_fix
    from hlo_doctor.fixes.source.base import Hint

    if list_fixes:
        print_wide(_catalog_table())
        return
    if revert and (dry_run or complete or from_run is not None):
        raise click.UsageError("--revert cannot be combined with --dry-run, --complete or --from")
    preview = dry_run or (not write and not sys.stdout.isatty())
    if from_run is not None:
        if fix_id or file or target:
            raise click.UsageError("--from takes no FIX, FILE or --target: it applies the fixes the diagnosis names")
        root = (source_root or repository_root(Path.cwd())).resolve()
        _from_run(from_run, root, unsafe, preview, fmt, output)
        return
    if not fix_id:
        raise click.UsageError("name a FIX (hlo-doctor apply-fix --list), or pass --from RUN")
    entry = catalog_entry(fix_id)
    if entry.scope == "tree":
        if file is not None or target is None:
            raise click.UsageError(f"{fix_id} edits a project: hlo-doctor apply-fix {fix_id} --target PATH")
        result = revert_fix(fix_id, target) if revert else apply_fix(fix_id, target, variant=variant,
                                                                    dry_run=dry_run, complete=complete)
        _finish(result, fmt, output)
        return
    if target is not None or file is None:
        raise click.UsageError(f"{fix_id} edits one file: hlo-doctor apply-fix {fix_id} FILE.py[:LINE]")
    path, line = _file_and_line(file)
    if revert:
        _finish(revert_source_fix(fix_id, path), fmt, output)
        return
    if preview and not dry_run:
        console.print("[dim]stdout is not a terminal: a dry run (--write applies)[/]")
    if argument and fix_id != "donate-state":
        raise click.UsageError("--arg is donate-state's: the argument to donate")
    result = apply_source_fix(fix_id, path, [(line, Hint(argument=argument))], dry_run=preview, unsafe=unsafe)
    if isinstance(result, FixRefused) and result.kind == "unsafe":
        console.print(f"[yellow]{escape(fix_id)} is unsafe: --unsafe applies it; verify the outputs after[/]")
    _finish(result, fmt, output)


COMMANDS = [apply_fix_cmd]
