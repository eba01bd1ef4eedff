"""CLI: ``hlo-doctor gate BASELINE CANDIDATE``: fail the build when a candidate's op stats regress."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from hlo_doctor.cli.common import (
    FormatChoice,
    announce_capture,
    console,
    examples,
    handle_errors,
    in_github_actions,
    output_option,
    people_see_a_terminal,
    write_output,
)
from hlo_doctor.cli.config import repository_root
from hlo_doctor.cli.hosts import host_options, left_out_note, pod_options
from hlo_doctor.core.blas import start_numpy_reading
from hlo_doctor.core.errors import InputError
from hlo_doctor.render.registry import GATE, RenderOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from hlo_doctor.gate import GateResult
    from hlo_doctor.hosts import PodOptions
    from hlo_doctor.opstats import OpStats

    Side = tuple[OpStats, dict[str, Any]]
    """A side's op stats, with what the comparison does not read let go, and its per-op samples."""

_STYLE = {
    "regressed": "bold red", "new: fails the gate": "bold red", "inconclusive": "yellow",
    "within noise": "dim", "not slower, within noise": "dim", "improved": "green", "vanished": "green", "new": "yellow",
}


def load_side(path: Path, side: str, options: PodOptions) -> Callable[[], OpStats]:
    """One side of a comparison read and summed as ``stats`` reads it; its table is built when the
    returned function is called. An unusable input names its side."""
    from hlo_doctor.hosts import read_capture_sums

    if not path.exists():
        raise InputError(f"{side} {path} does not exist",
                         "pass a run directory, an .xplane.pb file or an opstats.json export")
    try:
        say_capture = announce_capture(path, f"{side} capture")
        table = read_capture_sums(path, options)
        say_capture()
    except InputError as exc:
        # Name which side of the comparison the unusable input is.
        raise InputError(f"{side} {exc.what}", exc.hint) from exc

    def built() -> OpStats:
        try:
            stats, _ = table()
        except InputError as exc:
            raise InputError(f"{side} {exc.what}", exc.hint) from exc
        if stats.hosts_left_out:
            console.print(Text(f"note: {left_out_note(stats.hosts_left_out, f'{side}: ')}", style="yellow"),
                          soft_wrap=True)
        return stats
    return built


def read_sides(baseline: Path, candidate: Path, options: PodOptions) -> tuple[Side, Side]:
    """Both sides of a comparison (:func:`load_side`): both captures read and summed before either's
    table is built (a table loads pandas, which is then not resident while the other capture is
    read), each side's per-op samples taken as its table is made, and what the comparison does not
    read let go."""
    from hlo_doctor.gate.match import per_op_samples
    from hlo_doctor.opstats.build import shared_module_parses
    from hlo_doctor.opstats.per_step import empty_per_step
    from hlo_doctor.trace.columns import trim_freed_memory

    def side(built: Callable[[], OpStats]) -> Side:
        stats = built()
        samples = per_op_samples(stats)
        # Nor does the comparison read a side's per-step frame (never built from a capture's sums: its
        # samples come from the sums), step breakdown or parsed modules: let go too.
        stats = dataclasses.replace(stats, per_step_data=empty_per_step(), breakdown=None, modules=())
        trim_freed_memory()
        return stats, samples

    # A host read by parts sums no part of the step breakdown, which the comparison does not read.
    options = dataclasses.replace(options, breakdown=False)
    with shared_module_parses():  # the two sides of one program share most of their modules' texts
        base = load_side(baseline, "baseline", options)
        cand = load_side(candidate, "candidate", options)
        return side(base), side(cand)


def side_memory(path: Path, stats: OpStats) -> Any:
    """The capture's buffer assignments (its metadata planes), or None for an export or a trace JSON."""
    from hlo_doctor.memory import read_memory, runs_per_step

    try:
        return read_memory(path, runs=runs_per_step(stats.table, int(stats.num_steps or 0)))
    except InputError:
        return None


def _print_result(result: GateResult, max_rows: int) -> None:
    """The people's view on stderr: verdict, step line, violations, the ops that changed.

    Plain fixed-width lines (no wrapping table): CI logs are not terminals and must stay greppable.
    """
    from hlo_doctor.gate import Verdict

    colour = {Verdict.PASS: "green", Verdict.REGRESSION: "red", Verdict.INCONCLUSIVE: "yellow"}[result.verdict]
    lines = GATE.text("table", result, RenderOptions(rows=max_rows, fit=people_see_a_terminal())).splitlines()
    console.print(Text(lines[0], style=f"bold {colour}"))
    for line in lines[1:]:
        style = ""
        if line.startswith("  FAIL"):
            style = "bold red"
        elif line.startswith(("note:", "us: ", "policy: ")):
            style = "dim"
        else:
            style = next((s for judgement, s in _STYLE.items() if line.endswith(" " + judgement)), "")
        console.print(Text(line, style=style), soft_wrap=True)
    hidden = sum(1 for d in result.ops if d.judgement == "below floor")
    if hidden and max_rows > 0:
        console.print(Text(f"{hidden} matched op(s) below the {result.policy.op_floor_us:g} us/step floor "
                           "not shown", style="dim"))


@click.command("gate", epilog=examples(
    "hlo-doctor gate baseline/ runs/pr-123                  # verdict on stderr, exit 1 on a regression",
    "hlo-doctor gate baseline/ runs/pr-123 --format junit -o gate.xml --md summary.md",
    "hlo-doctor gate baseline/ runs/pr-123 --strict --max-step-regression 3 --ignore-op 'jit_init*'",
))
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option("--policy", "policy_file", type=click.Path(path_type=Path),
              help="TOML policy file. Default: [tool.hlo-doctor.gate] of the nearest pyproject.toml "
                   "(from the current directory up to the repository root), else built-in defaults.")
@click.option("--format", "fmt", type=FormatChoice(list(GATE.names), {"text": "table"}),
              default=None, help="table: for people (stderr, or plain text to --output); github: workflow "
                                 "annotations of the violations on stdout, the table on stderr (the default "
                                 "under GITHUB_ACTIONS); json / md / junit: on stdout or --output; html: one self-contained "
                                 "page with charts (the 'report' extra).  [default: table]")
@output_option()
@click.option("--md", "md_file", type=click.Path(path_type=Path), help="Also write the Markdown summary to FILE.")
@click.option("--json", "json_file", type=click.Path(path_type=Path), help="Also write the JSON verdict to FILE.")
@click.option("--junit", "junit_file", type=click.Path(path_type=Path), help="Also write JUnit XML to FILE.")
@click.option("--strict", is_flag=True, help="A change within noise makes the verdict inconclusive (exit 1).")
@click.option("--max-step-regression", "max_step_regression_pct", type=float, metavar="PCT",
              help="Largest allowed step-time increase, percent (policy: max_step_regression_pct).")
@click.option("--max-op-regression", "max_op_regression_pct", type=float, metavar="PCT",
              help="Largest allowed increase of one op's time per step, percent (max_op_regression_pct).")
@click.option("--op-floor-us", "op_floor_us", type=float, metavar="US",
              help="Ops under this time per step in both runs are not judged (op_floor_us).")
@click.option("--fail-on-new", "fail_on_new", multiple=True, metavar="KIND",
              help="'aliasing-copy', 'standalone-convert', an opcode or a category whose appearance "
                   "fails (repeatable; replaces the policy's list).")
@click.option("--new-op-min-bytes", "new_op_min_bytes", type=int, metavar="BYTES",
              help="A new op fails only when it writes at least this many bytes (new_op_min_bytes).")
@click.option("--ignore-op", "--ignore", "ignore", multiple=True, metavar="GLOB",
              help="Glob on canonical keys module|opcode|shape of ops to leave out (repeatable; replaces the "
                   "policy's ignore list). --ignore is its old name.")
@click.option("--alpha", "alpha", type=float, help="Significance level (alpha).")
@click.option("--normalize-speed/--no-normalize-speed", "normalize_speed", default=None,
              help="Judge times relative to the machine speed of each capture (time-weighted median op ratio); "
                   "default on (normalize_speed).")
@click.option("--noise-z", "noise_z", type=float, metavar="Z",
              help="A timing regression must exceed Z times the noise between the captures (noise_z; "
                   "0: off).")
@click.option("--top", "--rows", "max_rows", type=click.IntRange(min=0), default=20, show_default=True,
              help="Ops shown in the table (--rows: its old name).")
@host_options
@handle_errors
def gate_cmd(
    baseline: Path, candidate: Path, policy_file: Path | None, fmt: str | None, output: Path | None,
    md_file: Path | None, json_file: Path | None, junit_file: Path | None, strict: bool,
    max_step_regression_pct: float | None, max_op_regression_pct: float | None, op_floor_us: float | None,
    fail_on_new: tuple[str, ...], new_op_min_bytes: int | None, ignore: tuple[str, ...],
    alpha: float | None, normalize_speed: bool | None, noise_z: float | None, max_rows: int,
    jobs: int | None, scheduler: str | None, skip_bad_hosts: bool,
) -> None:
    """Compare CANDIDATE's op stats with BASELINE's; exit 1 on a regression.

    \b
    BASELINE and CANDIDATE: run directories, .xplane.pb files or opstats.json exports.
    Ops are matched on module (without program id) | opcode | shape. New ops named by the policy
    (default: aliasing copies and standalone converts of 1 MiB or more) fail the gate; so do
    step-time and per-op regressions beyond the policy's limits that are significant
    (Mann-Whitney U on per-step samples plus a minimum effect), after dividing out each
    capture's machine speed and beyond the noise between the two captures. Slowdowns within
    noise pass, or are inconclusive under --strict. Details: docs/ci.md.

    \b
    Exit codes: 0 pass, 1 regression (or inconclusive under --strict), 2 bad input or policy.
    """
    start_numpy_reading()  # this process only reads: numpy with one BLAS thread
    # Imported here, not with the module: --help and the other commands start without them.
    from hlo_doctor.gate import gate, resolve_policy

    policy = resolve_policy(policy_file, {
        "max_step_regression_pct": max_step_regression_pct, "max_op_regression_pct": max_op_regression_pct,
        "op_floor_us": op_floor_us, "fail_on_new": fail_on_new, "new_op_min_bytes": new_op_min_bytes,
        "ignore": ignore, "alpha": alpha, "normalize_speed": normalize_speed,
        "noise_z": noise_z,
    })
    options = pod_options(jobs, scheduler, skip_bad_hosts)
    (base_stats, base_samples), (cand_stats, cand_samples) = read_sides(baseline, candidate, options)
    result = gate(base_stats, cand_stats, policy, strict=strict,
                  baseline_label=str(baseline), candidate_label=str(candidate),
                  baseline_memory=side_memory(baseline, base_stats), candidate_memory=side_memory(candidate, cand_stats),
                  samples=(base_samples, cand_samples))

    root = repository_root(Path.cwd())
    fmt = fmt or ("github" if in_github_actions() and output is None else "table")

    def render(kind: str) -> str:
        return GATE.text(kind, result, RenderOptions(source_root=root))

    for path, kind in ((md_file, "md"), (json_file, "json"), (junit_file, "junit")):
        if path is not None:
            write_output(render(kind), path)
    if fmt == "github":
        write_output(render(fmt), output)
        _print_result(result, max_rows)  # a CI log is read by people too
    elif fmt == "table":
        _print_result(result, max_rows)
        if output is not None:
            write_output(GATE.text("table", result, RenderOptions(rows=max_rows)), output)
    else:
        write_output(render(fmt), output)
        # The verdict and its reasons still go to the log.
        _print_result(result, 0)
    raise SystemExit(int(result.exit_code))


COMMANDS = [gate_cmd]
