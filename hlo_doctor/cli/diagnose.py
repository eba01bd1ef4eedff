"""CLI: ``diagnose`` (apply the rules to a run and report the findings)."""

from __future__ import annotations

import dataclasses
import io
import shlex
import sys
from pathlib import Path

import click
from rich.text import Text

from hlo_doctor.cli.common import (
    STDOUT,
    FormatChoice,
    announce_capture,
    console,
    examples,
    handle_errors,
    in_github_actions,
    output_option,
    people_see_a_terminal,
    print_wide,
    write_output,
)
from hlo_doctor.cli.config import repository_root
from hlo_doctor.cli.hosts import host_options, left_out_note, pod_options
from hlo_doctor.core.blas import start_numpy_reading
from hlo_doctor.core.errors import ExitCode, HloDoctorError
from hlo_doctor.core.escape.terminal import ShownConsole
from hlo_doctor.core.model import Severity
from hlo_doctor.render.registry import DIAGNOSIS, RenderOptions

_SEVERITIES = [s.name.lower() for s in Severity]


def _codes(values: tuple[str, ...] | list[str]) -> list[str]:
    return [c.strip() for v in values for c in v.split(",") if c.strip()]


@click.command("diagnose", epilog=examples(
    "hlo-doctor diagnose runs/decode                       # table on a terminal, one line per finding in a pipe",
    "hlo-doctor diagnose runs/decode --format sarif -o hlo.sarif --fail-on high",
    "hlo-doctor diagnose runs/decode --format github       # the default under GITHUB_ACTIONS",
))
@click.argument("run", type=click.Path(path_type=Path))
@click.option("--source", "source", type=click.Path(path_type=Path), default=None,
              help="Root of the source tree, for source rules (HD006).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(path_type=Path),
              help="A folder of your own rule files (hdNNN_<slug>.py); repeatable.")
@click.option("--format", "fmt", type=FormatChoice(list(DIAGNOSIS.names), {"rich": "table"}), default=None,
              help="table: report for people on stderr (a terminal) or one line per finding (a pipe); "
                   "concise: one line per finding; github: workflow annotations (default under GITHUB_ACTIONS); "
                   "json/md/sarif: machine output on stdout or --output.  [default: table]")
@output_option("Write the report to FILE instead of stdout ('-': stdout).")
@click.option("--source-root", "source_root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Paths in sarif/github/concise output are relative to DIR [default: the repository root].")
@click.option("--fail-on", "fail_on", type=click.Choice(_SEVERITIES, case_sensitive=False), default=None,
              help="Exit 1 when a finding at or above this severity remains.")
@click.option("--select", "select", multiple=True, help="Only these rules (codes or prefixes, comma-separated).")
@click.option("--ignore", "ignore", multiple=True, help="Skip these rules (codes or prefixes, comma-separated).")
@click.option("--brief", is_flag=True, help="Table: the findings and the summary only, no details.")
@click.option("--what-if/--no-what-if", "what_if", default=True, show_default=True,
              help="Where an XLA:CPU capture cannot price a finding (a narrower reduction's read), time the "
                   "replacement op here, when this machine has the capture's jax and jaxlib; measured once, "
                   "kept with the capture and reused.")
@click.option("--remeasure", is_flag=True,
              help="Measure the what-if runs again instead of reusing what is kept for this capture, and keep that.")
@host_options
@handle_errors
def diagnose_cmd(run: Path, source: Path | None, rules_dirs: tuple[Path, ...], fmt: str | None, output: Path | None,
                 source_root: Path | None, fail_on: str | None, select: tuple[str, ...], ignore: tuple[str, ...],
                 brief: bool, what_if: bool, remeasure: bool, jobs: int | None, scheduler: str | None,
                 skip_bad_hosts: bool) -> None:
    """Apply the rules to RUN and report what is wasted, where, and the fix.

    RUN: a run directory from 'hlo-doctor profile', a bare .xplane.pb (any backend), a folder
    with opstats.json and *.hlo.txt modules, an --xla_dump_to folder (optimized HLO; no times),
    or one HLO text file. Defaults for --select, --ignore, --fail-on, --rules, --source and
    --source-root come from [tool.hlo-doctor] (and [tool.hlo-doctor.diagnose]) of pyproject.toml.

    \b
    Exit codes: 0 done (no finding at or above --fail-on), 1 findings at or above --fail-on,
    2 usage or input error, 3 internal error.
    """
    start_numpy_reading()  # this process only reads: numpy with one BLAS thread
    # Imported here, not with the module: --help and the other commands start without them.
    from hlo_doctor.cli.progress import progress_bars
    from hlo_doctor.fixes.source.applicable import with_applicable_fixes
    from hlo_doctor.hosts import CaptureReader
    from hlo_doctor.lint import diagnose, load_context, load_rulebook
    from hlo_doctor.lint.activity import reported_to
    from hlo_doctor.lint.measurement import measure_budget
    from hlo_doctor.lint.promise import with_fixes
    from hlo_doctor.lint.runner import replay_unfixed, replayed
    from hlo_doctor.lint.store import MeasurementStore, store_capture

    fmt = fmt or ("github" if in_github_actions() and output is None else "table")
    budget_s = measure_budget()  # (a bad HLO_DOCTOR_MEASURE_SECONDS is exit 2 before anything is read)
    say_capture = announce_capture(run)
    book = load_rulebook(rules_dirs)
    pod = pod_options(jobs, scheduler, skip_bad_hosts)
    if not rules_dirs:
        # The bundled rules read the step breakdown's figures and each host's steps, never every
        # device's slices: hosts read by parts keep their sums and those steps (SliceSums), not a slice
        # per device and step of every host. A rule of one's own is given every slice.
        pod = dataclasses.replace(pod, breakdown_steps=False)
    reader = CaptureReader(pod)
    store = MeasurementStore(store_capture(run), remeasure=remeasure) if what_if else None
    ctx = dataclasses.replace(load_context(run, source_root=source, reader=reader), what_if=what_if,
                              measurements=store, measure_seconds=budget_s)
    say_capture()
    if reader.left_out:
        console.print(Text(f"note: {left_out_note(reader.left_out)}", style="yellow"), soft_wrap=True)
    # What is timed here (replays, A/Bs, what-ifs: up to the budget each) shows as progress, so that a
    # measuring diagnosis is not silent on a terminal or in a CI log until its report.
    with progress_bars() as progress, reported_to(progress):
        result = diagnose(ctx, book, select=_codes(select), ignore=_codes(ignore))
        if run.is_dir():
            from hlo_doctor.core.sources import changed_since, recorded

            # Line numbers are the capture's: say where a file they point into has changed since.
            for line in changed_since(recorded(run), (f.source for f in result.findings)):
                console.print(Text(f"note: {line}", style="yellow"), soft_wrap=True)
        root = source_root or repository_root(Path.cwd())
        # A finding carries a fix only where its codemod matches the finding's own line in this project.
        applicable = with_applicable_fixes(result.findings, root)
        # Each fix offered on this code has its promise (what it recovers less what a what-if says it costs).
        result = dataclasses.replace(result, findings=applicable, fix_promises=with_fixes(result.fix_promises, applicable))
        # Each fix offered only on this code is replayed too, where this machine can run the capture.
        result = dataclasses.replace(result, fix_promises=replayed(ctx, result.fix_promises, applicable))
        # A waste no fix here answers (a library's code) is measured the same way where a replay removes it.
        result = replay_unfixed(ctx, result)
        if what_if and result.fix_promises:
            # A capture of `profile FILE.py:FUNC` this machine can run: each file fix timed on the program
            # itself, read from the store; verify is imported only when it measures.
            from hlo_doctor.lint.promise import with_program_ab

            def measure(*args: object) -> object:
                from hlo_doctor.verify.program.promise import measure as measure_program

                return measure_program(*args, store)  # type: ignore[arg-type,call-arg]

            result = dataclasses.replace(result, fix_promises=with_program_ab(run, result.fix_promises, applicable, store,
                                                                              measure, budget_s=budget_s))  # type: ignore[arg-type]
            # A capture of the engine this machine can run again: each fix timed on the engine itself (a
            # capture of tpu-inference: why not, in one line).
            from hlo_doctor.lint.engine_ab import with_engine_ab

            def measure_engine(*args: object) -> object:
                from hlo_doctor.verify.engine.promise import measure as measure_on_engine

                return measure_on_engine(*args, store)  # type: ignore[arg-type,call-arg]

            result = dataclasses.replace(result, fix_promises=with_engine_ab(
                _read_from(run), result.fix_promises, applicable, store, measure_engine,  # type: ignore[arg-type]
                backend=result.backend, budget_s=budget_s))
    failed = fail_on is not None and bool(result.at_or_above(Severity.parse(fail_on)))
    code = ExitCode.FINDINGS if failed else ExitCode.OK
    if fmt == "table" and (output is None or output == STDOUT) and not people_see_a_terminal():
        # A pipe or a CI log: no table folded to 80 columns; one greppable line per finding.
        console.print(DIAGNOSIS.text("concise", result, RenderOptions(source_root=root)), end="", soft_wrap=True,
                      markup=False)
    elif fmt == "table":
        renderable = DIAGNOSIS.render("table", result, RenderOptions(details=not brief))
        if output is None or output == STDOUT:
            print_wide(renderable)
        else:
            buf = io.StringIO()
            ShownConsole(file=buf, width=160, no_color=True, highlight=False).print(renderable)
            write_output(buf.getvalue(), output)
    else:
        command = shlex.join(["hlo-doctor", *sys.argv[1:]])
        options = RenderOptions(source_root=root, rulebook=book, exit_code=int(code), command_line=command)
        write_output(DIAGNOSIS.text(fmt, result, options), output)
        if fmt != "concise" or output is not None:
            console.print(result.summary_line(), soft_wrap=True, markup=False)
    if store is not None:  # after the report: what was measured here, or reused, and where it is kept
        for line in (*(f"note: {w}" for w in store.warnings), store.summary()):
            if line:
                console.print(Text(line, style="yellow"), soft_wrap=True)
    if any(f.extra and dict(f.extra).get("internal_error") for f in result.findings) or book.errors:
        console.print("[yellow]some rules failed; see the internal-error findings above[/]")
    if failed:
        sys.exit(int(code))


def _read_from(run: Path) -> Path:
    """The capture ``run`` names (a doctor folder's baseline profile, not the folder), as announced."""
    from hlo_doctor.trace.locate import locate_capture

    try:
        where = locate_capture(run) if run.exists() else None
    except HloDoctorError:
        return run
    return run if where is None else where.files[0] if where.files else where.path


COMMANDS = [diagnose_cmd]
