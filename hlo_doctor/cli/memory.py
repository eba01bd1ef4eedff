"""CLI: ``memory RUN`` (each program's peak device memory and the buffers live at it, from the
capture's buffer assignments)."""

from __future__ import annotations

from pathlib import Path

import click

from hlo_doctor.cli.common import (
    FormatChoice,
    examples,
    handle_errors,
    output_option,
    plain_text,
    print_wide,
    write_output,
)
from hlo_doctor.core.blas import start_numpy_reading

__all__ = ["COMMANDS", "memory_cmd", "memory_report"]


def _steps_beside(path: Path) -> dict[tuple[str, int | None], float] | None:
    """How often each program ran per step, from the run's ``opstats.json`` when ``profile`` wrote one
    (reading the trace's op events again would cost more than the buffer assignments do)."""
    run = path if path.is_dir() else None
    if run is None or not (run / "opstats.json").is_file():
        return None
    from hlo_doctor.memory import runs_per_step
    from hlo_doctor.opstats import load_opstats

    stats = load_opstats(run / "opstats.json")
    return runs_per_step(stats.table, int(stats.num_steps or 0)) or None


def memory_report(path: Path, *, only: tuple[str, ...] = (), describe: str = "all"):  # type: ignore[no-untyped-def]
    """The :class:`~hlo_doctor.memory.MemoryReport` of a run directory, log directory or xplane
    (``only``, ``describe``: :func:`hlo_doctor.memory.read_memory`)."""
    from hlo_doctor.memory import read_memory

    return read_memory(path, runs=_steps_beside(path), only=only, describe=describe)


@click.command("memory", epilog=examples(
    "hlo-doctor memory runs/decode                       # the programs of a step side by side",
    "hlo-doctor memory runs/decode --format json -o memory.json",
    "hlo-doctor memory run.xplane.pb --all --buffers 10",
    "hlo-doctor memory runs/decode --program jit_sample     # one program (or name(id)), read alone",
))
@click.argument("run", type=click.Path(path_type=Path, exists=True))
@click.option("--format", "fmt", type=FormatChoice(["table", "json", "md", "csv"], {"markdown": "md"}),
              default="table", show_default=True,
              help="table: for people on stderr; json (with the heap over program order), md, csv: on stdout "
                   "or --output.")
@click.option("--all", "all_programs", is_flag=True,
              help="Also the programs that did not run in the captured steps (set-up, warm-up).")
@click.option("--buffers", type=click.IntRange(min=0), default=5, show_default=True,
              help="Buffers shown per program (the largest live at its peak).")
@click.option("--program", "programs", multiple=True, metavar="NAME",
              help="Only this program (module name, or name(id) as listed); repeatable. The others are not read.")
@output_option()
@handle_errors
def memory_cmd(run: Path, fmt: str, all_programs: bool, buffers: int, programs: tuple[str, ...],
               output: Path | None) -> None:
    """Peak device memory of each program of RUN and what is live at it.

    From the buffer assignments XLA stores with each program's HLO in the capture: the peak (as
    xprof's memory viewer counts it), arguments, outputs, donated bytes, temporaries, and the
    buffers live at the peak with their op, shape and source line. A trace JSON holds none.
    """
    start_numpy_reading()  # this process only reads: numpy with one BLAS thread
    from hlo_doctor.render import memory as render

    # The table and Markdown views show the step's programs: only theirs are described (HLO parsed).
    whole = fmt in ("json", "csv") or all_programs or bool(programs)
    report = memory_report(run, only=programs, describe="all" if whole else "step")
    all_programs = all_programs or bool(programs)
    if fmt == "json":
        write_output(render.to_json(report), output)
    elif fmt == "csv":
        write_output(render.to_csv(report, all_programs=True), output)
    elif fmt == "md":
        write_output(render.to_markdown(report, all_programs=all_programs, buffers=buffers), output)
    elif output is not None:
        write_output(plain_text(render.to_terminal(report, all_programs=all_programs, buffers=buffers)), output)
    else:
        print_wide(render.to_terminal(report, all_programs=all_programs, buffers=buffers))


COMMANDS = [memory_cmd]
