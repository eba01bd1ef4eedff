"""``stats --breakdown``: the step breakdown of a capture instead of its op table.

Per device and step: busy (the union of the op intervals), idle, and what the host's driver thread
ran while the device idled (Python, dispatch, compile, waiting), with the source lines that filled
the idle time (:mod:`hlo_doctor.opstats.breakdown`). ``--format`` picks the rendering: ``table``
(people, stderr), ``json`` (everything, stdout or ``-o``), ``markdown``, ``csv`` (one row per device
and step; where several threads of a host dispatch programs, two more blocks, each after a blank line
with its own header: a row per thread, and the other threads' lines).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.cli.common import plain_text, print_wide, write_output
from hlo_doctor.core.errors import InputError
from hlo_doctor.core.escape.csv import csv_cell

if TYPE_CHECKING:
    from hlo_doctor.opstats import OpStats
    from hlo_doctor.opstats.breakdown import StepBreakdown

BREAKDOWN_HELP = ("Print the step breakdown instead of the op table: per device and step, device busy (union of "
                  "the op intervals), idle, and what the host ran while the device idled (Python lines, dispatch, "
                  "compile), and a row per thread where several threads dispatch programs. "
                  "--format table/json/markdown/csv.")


class _Cells:
    """A CSV writer whose text cells (hosts, threads, source lines from the capture) are written with
    ``csv_cell``: no formula a spreadsheet would run. Numbers, written by this module, pass."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    @staticmethod
    def _cell(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            float(value)
        except ValueError:
            return csv_cell(value)
        return value

    def writerow(self, row: Any) -> None:
        self.writer.writerow([self._cell(v) for v in row])

    def writerows(self, rows: Any) -> None:
        for row in rows:
            self.writerow(row)


def _csv(b: StepBreakdown) -> str:
    from hlo_doctor.opstats.breakdown import HOST_KINDS

    buf = io.StringIO()
    w = _Cells(csv.writer(buf, lineterminator="\n"))
    w.writerow(["host", "device", "step", "start_us", "wall_us", "busy_us", "idle_us", "op_us",
                *(f"host_{k}_us" for k in HOST_KINDS), *(f"idle_{k}_us" for k in HOST_KINDS)])
    for s in b.steps:
        w.writerow([s.host, s.device, s.step, *(f"{v:.3f}" for v in (s.start_us, s.wall_us, s.busy_us, s.idle_us, s.op_us)),
                    *(f"{s.host_us.get(k, 0.0):.3f}" for k in HOST_KINDS),
                    *(f"{s.idle_by_kind.get(k, 0.0):.3f}" for k in HOST_KINDS)])
    _csv_threads(b, w, buf)
    return buf.getvalue()


def _csv_threads(b: StepBreakdown, w: Any, buf: io.StringIO) -> None:
    """The threads block and the other threads' lines block (only where a host has two dispatching
    threads: the CSV of every other capture is the step rows alone). Times per device step, in us."""
    from hlo_doctor.opstats.breakdown import HOST_KINDS
    from hlo_doctor.render.breakdown_threads import concurrent_hosts, other_lines

    if not concurrent_hosts(b):
        return
    buf.write("\n")
    w.writerow(["host", "thread", "entry", "role", "dispatch_spans", *(f"host_{k}_us" for k in HOST_KINDS),
                *(f"idle_{k}_us" for k in HOST_KINDS)])
    for t in b.threads:
        w.writerow([t.host, t.thread, t.entry, "driver" if t.driver else "apart", t.dispatches,
                    *(f"{t.host_by_kind_us.get(k, 0.0):.3f}" for k in HOST_KINDS),
                    *(f"{t.idle_by_kind_us.get(k, 0.0):.3f}" for k in HOST_KINDS)])
    pairs = other_lines(b)
    if pairs:
        buf.write("\n")
        w.writerow(["host", "thread", "idle_us", "host_us", "kind", "where", "target", "source"])
        w.writerows([t.host, t.thread, f"{x.idle_us:.3f}", f"{x.host_us:.3f}", x.kind, x.where, x.target, x.source]
                    for t, x in pairs)


def emit_breakdown(stats: OpStats, fmt: str, output: Path | None) -> None:
    """Print or write the breakdown of ``stats`` in ``fmt``; exit 2 (one line) when it has none."""
    # Imported here, not with the module, as every renderer of the CLI: the commands start fast.
    from hlo_doctor.render.breakdown import to_json, to_markdown, to_terminal

    b = stats.breakdown
    if b is None:
        raise InputError(f"{stats.source_path}: no step breakdown (an opstats.json written before it, or "
                         "without --per-step)", "run 'hlo-doctor stats' on the run directory or the .xplane.pb")
    if fmt == "json":
        write_output(to_json(b), output)
    elif fmt == "markdown":
        write_output(to_markdown(b, stats.source_path), output)
    elif fmt == "csv":
        write_output(_csv(b), output)
    elif output is not None:
        write_output(plain_text(to_terminal(b, stats.source_path)), output)
    else:
        print_wide(to_terminal(b, stats.source_path))
