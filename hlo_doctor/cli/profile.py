"""CLI: ``profile`` (capture a trace and build the op-stats table) and ``stats`` (the table of an
existing capture)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hlo_doctor.capture_guard import sigterm_as_interrupt, stdout_to_stderr
from hlo_doctor.cli.breakdown_view import BREAKDOWN_HELP, emit_breakdown
from hlo_doctor.cli.common import (
    announce_capture,
    console,
    examples,
    handle_errors,
    output_option,
    people_see_a_terminal,
    plain_text,
    print_wide,
    write_output,
)
from hlo_doctor.cli.hosts import host_options, pod_options
from hlo_doctor.cli.progress import progress_bars
from hlo_doctor.cli.report import write_capture_report
from hlo_doctor.core.blas import start_numpy_reading
from hlo_doctor.core.errors import InputError, NotAvailableError
from hlo_doctor.core.escape.terminal import term
from hlo_doctor.core.model import ProgressFn

if TYPE_CHECKING:
    # The table's libraries (pandas, numpy) and the capture readers are imported by the commands
    # that build or print a table, not when the CLI starts.
    from hlo_doctor.opstats import OpStats

_PHASES = {"warmup": "warm-up (untraced)", "precompile": "precompile (programs)", "capture": "capture (traced)",
           "analyze": "building the table"}


def header_line(stats: OpStats) -> str:
    """One line saying what the table was built from (steps, their source, the step time)."""
    how = {"annotation": "step annotations", "device-steps": "the devices' Steps lines"}.get(
        stats.step_source, "executions of the main module")
    kind = f" ({stats.device_kind})" if stats.device_kind and stats.device_kind != stats.backend else ""
    per_device = f" per device ({stats.num_devices} devices)" if stats.num_devices > 1 else ""
    left_out = (f" · {len(stats.hosts_left_out)} host file(s) LEFT OUT (see the notes)"
                if stats.hosts_left_out else "")
    records = stats.records()
    return (f"{stats.backend}{kind} · {stats.num_steps} steps{per_device} from {how} · mean step wall time "
            f"{stats.step_time_us:,.1f} µs · {len(records)} ops in {len({r['module'] for r in records})} "
            f"modules · {_compiles(stats)}{left_out}")


def _account(stats: OpStats) -> Any:
    """The capture's compile account: programs actually compiled, nested compile events counted once
    (:mod:`hlo_doctor.lint.compiles`)."""
    from hlo_doctor.lint.compiles import account_compiles

    return account_compiles(stats.compile_events, stats.modules, num_steps=stats.num_steps)


def _compiles(stats: OpStats) -> str:
    """``3 compiles in the traced window (+ 27 eager ops)``: the table's header, from :func:`_account`."""
    account = _account(stats)
    n = account.program_count
    text = f"{n} compile{'s' if n != 1 else ''} in the traced window"
    eager = len(account.eager)
    return text + (f" (+ {eager} eager op{'s' if eager != 1 else ''})" if eager else "")


def compile_summary(stats: OpStats) -> dict[str, Any]:
    """What the table's header counts, for the JSON export: ``programs`` (compiles of programs in the
    traced window), ``eager_ops`` (single-op programs jax compiled apart), ``events`` (the raw
    compile-work events they are counted from: a compile's lowering, backend compile and the
    compiler's own event are one compile), ``line`` (the header's words) and the per-program and eager
    detail."""
    account = _account(stats)
    return {"programs": account.program_count, "eager_ops": len(account.eager),
            "events": len(stats.compile_events), "line": _compiles(stats), **account.to_dict()}


def pct_note(backend: str) -> str:
    """What the % column means, true to the backend: XLA:CPU runs independent ops on several threads
    at once; a TPU core or a GPU stream runs its ops one after another."""
    base = "% of step = time per step on one device / mean step wall time"
    if backend == "cpu":
        return base + "; XLA:CPU overlaps ops, so the column can sum past 100"
    return base


def _table(stats: OpStats, top: int, group_by: str, *, wide: bool) -> Group:
    """The table people read, with its header lines and notes; ``wide`` adds n, program, bytes, the
    roofline (bandwidth, FLOP rate, intensity, bound-by, % of the device's peaks) and source."""
    from hlo_doctor.core.format import fmt_bytes, fmt_source
    from hlo_doctor.hlo.shape import fmt_shape
    from hlo_doctor.opstats import group_by_shape
    from hlo_doctor.opstats.roofline import peaks_line
    from hlo_doctor.render.opstats import ROOFLINE_HEADERS, roofline_cells

    parts: list[RenderableType] = [
        Text.from_markup(f"[bold]op stats[/] {escape(stats.source_path)}"),
        Text(header_line(stats)),
        Text(pct_note(stats.backend), style="dim"),
    ]
    if wide:
        parts.append(Text(peaks_line(stats.peaks, stats.backend), style="dim"))
    if group_by == "shape":
        grouped = group_by_shape(stats.table).head(top)
        t = Table(show_lines=False, header_style="bold")
        for name, justify in (("#", "right"), ("% step", "right"), ("µs/step", "right"), ("ops", "right"),
                              ("opcode", "left"), ("category", "left"), ("shape", "left"),
                              ("bytes", "right"), ("modules", "left")):
            t.add_column(name, justify=justify)  # type: ignore[arg-type]
        for r in grouped.itertuples(index=False):
            t.add_row(str(r.rank), f"{r.pct_of_step:.1f}", f"{r.time_per_step_us:,.1f}", str(r.ops),
                      Text(term(r.opcode)), Text(term(r.category)), Text(term(fmt_shape(str(r.shape)))),
                      fmt_bytes(r.bytes_accessed), Text(term(r.modules)))
        return Group(*parts, t)
    columns = [("#", "right"), ("% step", "right"), ("µs/step", "right")]
    if wide:
        columns += [("n", "right"), ("program", "right")]
    columns += [("module", "left"), ("op", "left"), ("category", "left"), ("shape", "left")]
    if wide:
        columns += [("bytes", "right"), *((h, "left" if h == "bound" else "right") for h in ROOFLINE_HEADERS),
                    ("source", "left")]
    t = Table(show_lines=False, header_style="bold")
    for name, justify in columns:
        t.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    # (The rows as the table holds them, read without building it: the table people read loads no pandas.)
    records = stats.records()
    for r in records[:top]:
        pid = "" if r["program_id"] is None else str(r["program_id"])
        cells = {"#": str(r["rank"]), "% step": f"{r['pct_of_step']:.1f}", "µs/step": f"{r['time_per_step_us']:,.1f}",
                 "n": str(r["occurrences"]), "program": pid, "module": str(r["module"]), "op": str(r["op"]),
                 "category": str(r["category"]), "shape": fmt_shape(str(r["shape"])),
                 "bytes": fmt_bytes(r["bytes_accessed"]), "source": fmt_source(r["source"] if isinstance(r["source"], str) else ""),  # relative to its package root; csv/json keep the path
                 **(roofline_cells(r) if wide else {})}
        # Text, not str: names and paths come from the trace and are never markup.
        # term(): one line per cell whatever a name holds (a newline, an escape sequence).
        t.add_row(*(Text(term(cells[name])) for name, _ in columns))
    parts.append(t)
    if len(records) > top:
        parts.append(Text(f"{len(records) - top} more rows: --top N, or --format csv/json", style="dim"))
    parts.extend(Text.from_markup(f"[yellow]note:[/] {escape(w)}") for w in stats.warnings)
    return Group(*parts)


def _emit(stats: OpStats, fmt: str, top: int, group_by: str, output: Path | None, wide: bool = False,
          per_step: bool = False) -> None:
    from hlo_doctor.opstats import group_by_shape, to_csv, to_json
    from hlo_doctor.opstats.parquet import wants_parquet, write_parquet
    from hlo_doctor.render.opstats import to_markdown

    if wants_parquet(fmt, output):
        console.print(f"wrote {write_parquet(stats, output)}", soft_wrap=True)  # type: ignore[arg-type]
        return
    if fmt == "table" and output is not None:
        write_output(plain_text(_table(stats, top, group_by, wide=True)), output)
        return
    if fmt == "table":
        # A narrow terminal keeps the columns a person ranks by; a pipe or a log gets every column, unfolded.
        print_wide(_table(stats, top, group_by,
                          wide=wide or console.width >= 140 or not people_see_a_terminal()))
        return
    if fmt == "markdown":
        write_output(to_markdown(stats, top), output)
        return
    if fmt == "csv":
        table = group_by_shape(stats.table) if group_by == "shape" else stats.table
        write_output(to_csv(table), output)
    else:
        write_output(to_json(stats, per_step=per_step, compact=True, compiles=compile_summary(stats)), output)


_COMMON = [
    click.option("--top", type=click.IntRange(min=1), default=20, show_default=True,
                 help="Rows of the printed table (json/csv hold every row)."),
    click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "markdown", "parquet"]),
                 default="table", show_default=True,
                 help="table: for people on stderr (every column, unfolded, off a terminal); "
                      "json/csv: machine output on stdout or --output; markdown: the top "
                      "rows with the roofline, for a pull request or a report; parquet (-o FILE, "
                      "or -o FILE.parquet): the per-step samples as columns, the rest beside them "
                      "(the 'parquet' extra)."),
    click.option("--group-by", type=click.Choice(["op", "shape"]), default="op", show_default=True,
                 help="shape: aggregate rows that share (opcode, shape)."),
    output_option("Write the --format output to FILE ('-': stdout; table: plain text, every column)."),
    click.option("--per-step", is_flag=True, help="json: also every op's time in every step (what the gate's "
                                                   "statistics read; the bulk of a long capture's export)."),
]


def _common(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_COMMON):
        func = option(func)
    return func


# CLI option -> EngineConfig field, passed through when the engine's config has the field.
_ENGINE_OPTIONS = {"batch": "batch", "vocab": "vocab_size", "layers": "num_layers"}


def _engine_target(engine_path: Path | None, overrides: dict[str, Any]) -> Any:
    """The bundled reference engine's capture target (or that of the engine source tree at ``engine_path``),
    configured with the options given (``None``: the engine's default); an :class:`EngineTarget`."""
    try:
        engines = importlib.import_module("hlo_doctor.engines")
    except ModuleNotFoundError as exc:
        if exc.name != "hlo_doctor.engines":
            raise
        raise NotAvailableError("the reference engine is not available in this build",
                                "pass a TARGET (path/to/file.py:func) or --attach HOST:PORT") from exc
    eng = engines.load_engine(engine_path)
    known = engines.config_fields(eng)
    given: dict[str, Any] = {}
    for option, value in overrides.items():
        if value is None:
            continue
        field_name = _ENGINE_OPTIONS.get(option, option)
        if field_name not in known:
            raise InputError(f"--{option}: this engine's config has no {field_name}",
                             f"its fields: {', '.join(sorted(known))}")
        given[field_name] = value
    if "batch" in given and "max_num_reqs" in known:
        # As verify and doctor do: the menu stops at the batch's bucket, the only one its steps run in.
        given["max_num_reqs"] = engines.batch_bucket(given["batch"])
    config = engines.checked_config(eng, **given)
    return engines.engine_target(eng, config, "engine" + (f":{engine_path}" if engine_path is not None else ""))


@click.command("profile", epilog=examples(
    "hlo-doctor profile --out runs/decode                   # the bundled reference engine",
    "hlo-doctor profile my_model.py:step --steps 20 --out runs/mine",
    "hlo-doctor profile --attach localhost:9999 --duration-ms 3000 --format json -o stats.json",
))
@click.argument("target", required=False)
@click.option("--steps", type=int, default=10, show_default=True, help="Traced steps.")
@click.option("--warmup", type=int, default=3, show_default=True, help="Untraced steps before the trace.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory to write (default: runs/profile-<time>).")
@click.option("--attach", metavar="HOST:PORT", default=None,
              help="Capture from a running program that called jax.profiler.start_server(PORT).")
@click.option("--duration-ms", type=int, default=2000, show_default=True, help="Capture length with --attach.")
@click.option("--engine", "engine_path", type=click.Path(path_type=Path), default=None,
              help="Engine source tree to profile (default: the bundled reference engine).")
@click.option("--batch", type=int, default=None, help="Engine batch size (engine target only); the precompiled menu stops at its "
              "num_reqs bucket.")
@click.option("--vocab", type=int, default=None, help="Engine vocabulary size (engine target only).")
@click.option("--layers", type=int, default=None, help="Engine decoder layers (engine target only).")
@click.option("--timeout", "timeout_s", type=float, default=None, metavar="SECONDS",
              help="Longest one step (or the warm-up call) of the target may take; past it: exit 2, nothing "
                   "written.  [default: no limit]")
@_common
@handle_errors
def profile_cmd(target: str | None, steps: int, warmup: int, out: Path | None, attach: str | None,
                duration_ms: int, engine_path: Path | None, batch: int | None, vocab: int | None,
                layers: int | None, timeout_s: float | None, top: int, fmt: str, group_by: str,
                output: Path | None, per_step: bool) -> None:
    """Capture a trace of TARGET and print its op-stats table.

    \b
    TARGET:
      (none)                 the bundled reference engine (--engine PATH, --batch, --vocab, --layers)
      path/to/file.py:func   func() runs one step and returns JAX arrays
      package.module:func    the same, imported by name
      --attach HOST:PORT     a running program with jax.profiler.start_server(PORT)

    Writes a run directory that xprof opens unchanged (plugins/profile/<run>/<host>.xplane.pb),
    run.json, opstats.csv, opstats.json and report.html. What the target prints goes to stderr; SIGTERM and
    Ctrl-C leave no partial folder behind.
    """
    from hlo_doctor.lint.activity import reported_to
    from hlo_doctor.lint.measurement import measure_budget

    measure_budget()  # (a bad HLO_DOCTOR_MEASURE_SECONDS is exit 2 before anything runs: the report measures)
    with stdout_to_stderr(), sigterm_as_interrupt(), progress_bars(_PHASES) as progress:
        run_dir, stats = _capture(target, steps, warmup, out, attach, duration_ms, engine_path,
                                  {"batch": batch, "vocab": vocab, "layers": layers}, timeout_s, progress)
        # The report's diagnosis times its fixes here (kept with the run for diagnose): shown as it goes.
        with reported_to(progress):
            write_capture_report(run_dir, stats)
    console.print(Text(f"wrote {run_dir} (open it with: xprof --logdir {run_dir})"), soft_wrap=True)
    _emit(stats, fmt, top, group_by, output, per_step=per_step)


def _capture(target: str | None, steps: int, warmup: int, out: Path | None, attach: str | None,
             duration_ms: int, engine_path: Path | None, engine_options: dict[str, int | None],
             timeout_s: float | None, progress: ProgressFn) -> tuple[Path, OpStats]:
    """The capture behind ``profile``: attach, a TARGET function, or the engine."""
    from hlo_doctor.capture import (
        attach_run,
        capture_run,
        default_run_dir,
        keep_gpu_ops_visible,
        resolve_target,
    )

    out_dir = out if out is not None else default_run_dir()
    if attach is None:
        keep_gpu_ops_visible()
    if attach is not None:
        if target is not None:
            raise InputError("TARGET and --attach both given", "pass one of them")
        run_dir, stats = attach_run(attach, duration_ms=duration_ms, out_dir=out_dir, progress=progress)
    else:
        config: dict[str, Any] = {}
        engine_warmup: Callable[[ProgressFn | None], None] | None = None
        if target is not None:
            if engine_path is not None or any(v is not None for v in engine_options.values()):
                raise InputError("--engine/--batch/--vocab/--layers apply to the bundled engine only",
                                 "drop them, or drop TARGET to profile the engine")
            step_fn = resolve_target(target)
            name = target
        else:
            engine_target = _engine_target(engine_path, engine_options)
            step_fn, name, config = engine_target.step, engine_target.name, engine_target.metadata
            engine_warmup = engine_target.warmup
        # The engine's warm-up reports its precompile (programs done / total) on the same display.
        warmup_fn = None if engine_warmup is None else functools.partial(engine_warmup, progress)
        run_dir, stats = capture_run(step_fn, steps=steps, warmup=warmup, out_dir=out_dir, target=name,
                                     config=config, warmup_fn=warmup_fn, progress=progress,
                                     timeout_s=timeout_s)
    return run_dir, stats


@click.command("stats", epilog=examples(
    "hlo-doctor stats runs/decode --top 10",
    "hlo-doctor stats runs/decode --format csv -o ops.csv",
    "hlo-doctor stats runs/decode --group-by shape | cat    # every column, unfolded",
    "hlo-doctor stats runs/decode --breakdown                # busy, idle, what the host ran",
    "hlo-doctor stats logs/pod --jobs 8 --format json -o pod.json   # one table of every host file",
))
@click.argument("source", type=click.Path(path_type=Path))
@_common
@click.option("--wide", is_flag=True, help="Every column of the table on a terminal too (program, bytes, "
                                           "the roofline: GiB/s, % of peak, GFLOP/s, FLOP/byte, bound-by, source).")
@click.option("--breakdown", is_flag=True, help=BREAKDOWN_HELP)
@click.option("--memory", "memory", is_flag=True,
              help="The memory section instead: each program of the steps' peak and the buffers at it "
                   "(what 'hlo-doctor memory' shows, from the same capture).")
@host_options
@handle_errors
def stats_cmd(source: Path, top: int, fmt: str, group_by: str, output: Path | None, per_step: bool, wide: bool,
              breakdown: bool, memory: bool, jobs: int | None, scheduler: str | None, skip_bad_hosts: bool) -> None:
    """Print the op-stats table of an existing capture.

    SOURCE: a run directory (hlo-doctor's, or an xprof/TensorBoard log directory with
    plugins/profile/<run>/*.xplane.pb from one or several hosts), an .xplane.pb file, or an
    opstats.json export. The host files of a log directory are read side by side (--jobs, or a Dask
    cluster: --scheduler) into one table.
    """
    start_numpy_reading()  # this process only reads: numpy with one BLAS thread
    say_capture = announce_capture(source)
    _warm_printer(source)  # before the table's libraries are imported (pandas: ~0.3 s)
    from hlo_doctor.opstats.parquet import require_pyarrow, wants_parquet

    # A Parquet export that cannot be written is said before the capture is read (one line).
    if not memory and not breakdown and wants_parquet(fmt, output):
        require_pyarrow()
    from hlo_doctor.hosts import read_capture

    options = pod_options(jobs, scheduler, skip_bad_hosts)
    # The table, its CSV and Markdown and the memory section read no part of the step breakdown:
    # hosts read by parts then build none (the table is the same; JSON and Parquet hold it).
    if not breakdown and (memory or (fmt in ("table", "csv", "markdown") and not wants_parquet(fmt, output))):
        options = dataclasses.replace(options, breakdown=False)
    # JSON without --per-step shows the breakdown's summary, not its steps: their sums suffice.
    elif not breakdown and fmt == "json" and not per_step and not wants_parquet(fmt, output):
        options = dataclasses.replace(options, breakdown_steps=False)
    stats, _ = read_capture(source, options)
    say_capture()
    if memory:
        emit_memory(source, stats, fmt, output)
        return
    if breakdown:
        emit_breakdown(stats, fmt, output)
        return
    _emit(stats, fmt, top, group_by, output, wide, per_step)


def _warm_printer(source: Path) -> None:
    """Start XLA's HLO printer (a process importing jaxlib) for xplane files now: it overlaps our imports."""
    from hlo_doctor.hlo.printer import warm
    from hlo_doctor.trace.locate import locate_capture

    if source.exists() and locate_capture(source).kind in ("run", "xplane"):  # (announce_capture raised first)
        warm()


def emit_memory(source: Path, stats: OpStats, fmt: str, output: Path | None) -> None:
    """The memory section of ``stats``: the steps' programs (known from the table just read)."""
    from hlo_doctor.memory import read_memory, runs_per_step
    from hlo_doctor.render import memory as render

    report = read_memory(source, runs=runs_per_step(stats.table, int(stats.num_steps or 0)),
                         modules=stats.modules, describe="all" if fmt in ("json", "csv") else "step")
    if fmt == "json":
        write_output(render.to_json(report), output)
    elif fmt == "csv":
        write_output(render.to_csv(report), output)
    elif fmt == "markdown":
        write_output(render.to_markdown(report), output)
    elif output is not None:
        write_output(plain_text(render.to_terminal(report)), output)
    else:
        print_wide(render.to_terminal(report))


COMMANDS = [profile_cmd, stats_cmd]
