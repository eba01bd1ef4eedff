"""CLI: ``diagnose`` (apply the rules to a run and report the findings)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import click
from rich.console import Console

from hlo_doctor.cli.common import console, handle_errors, write_output
from hlo_doctor.core.errors import ExitCode
from hlo_doctor.core.model import Severity
from hlo_doctor.diagnose import diagnose, load_context
from hlo_doctor.render.diagnosis import FORMATS, to_terminal, to_text
from hlo_doctor.rulebook import load_rulebook

_SEVERITIES = [s.name.lower() for s in Severity]


def _codes(values: tuple[str, ...]) -> list[str]:
    return [c.strip() for v in values for c in v.split(",") if c.strip()]


@click.command("diagnose")
@click.argument("run", type=click.Path(path_type=Path))
@click.option("--source", "source", type=click.Path(path_type=Path), default=None,
              help="Root of the source tree, for source rules (HD006).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(path_type=Path),
              help="A folder of your own rule files (hdNNN_<slug>.py); repeatable.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="rich", show_default=True,
              help="rich: report for people on stderr; json/md/sarif: machine output on stdout or --output.")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--fail-on", "fail_on", type=click.Choice(_SEVERITIES, case_sensitive=False), default=None,
              help="Exit 1 when a finding at or above this severity remains.")
@click.option("--select", "select", multiple=True, help="Only these rules (codes or prefixes, comma-separated).")
@click.option("--ignore", "ignore", multiple=True, help="Skip these rules (codes or prefixes, comma-separated).")
@click.option("--brief", is_flag=True, help="Rich report: the table and summary only, no details.")
@handle_errors
def diagnose_cmd(run: Path, source: Path | None, rules_dirs: tuple[Path, ...], fmt: str, output: Path | None,
                 fail_on: str | None, select: tuple[str, ...], ignore: tuple[str, ...], brief: bool) -> None:
    """Apply the rules to RUN and report what is wasted, where, and the fix.

    RUN: a run directory from 'hlo-doctor profile', a bare .xplane.pb (any backend), a folder
    with opstats.json and *.hlo.txt modules, an --xla_dump_to folder (optimized HLO; no times),
    or one HLO text file.

    \b
    Exit codes: 0 done (no finding at or above --fail-on), 1 findings at or above --fail-on,
    2 usage or input error, 3 internal error.
    """
    book = load_rulebook(rules_dirs)
    ctx = load_context(run, source_root=source)
    result = diagnose(ctx, book, select=_codes(select), ignore=_codes(ignore))
    if fmt == "rich":
        renderable = to_terminal(result, details=not brief)
        if output is None:
            console.print(renderable)
        else:
            buf = io.StringIO()
            Console(file=buf, width=160, no_color=True, highlight=False).print(renderable)
            write_output(buf.getvalue(), output)
    else:
        write_output(to_text(result, fmt, book), output)
        console.print(result.summary_line(), soft_wrap=True)
    if any(f.extra and dict(f.extra).get("internal_error") for f in result.findings) or book.errors:
        console.print("[yellow]some rules failed; see the internal-error findings above[/]")
    if fail_on is not None:
        threshold = Severity.parse(fail_on)
        if result.at_or_above(threshold):
            sys.exit(int(ExitCode.FINDINGS))


COMMANDS = [diagnose_cmd]
