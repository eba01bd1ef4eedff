"""Reading and writing op stats: JSON and CSV exports, ``RunInfo`` as a dict, and the one loader
that takes a run directory, an xplane or an export."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hlo_doctor.core.atomic import write_atomically
from hlo_doctor.core.errors import InputError
from hlo_doctor.core.escape.csv import csv_cell
from hlo_doctor.core.lazy import pd
from hlo_doctor.core.model import RunInfo
from hlo_doctor.hlo.printer import warm as warm_printer
from hlo_doctor.opstats.build import build_opstats
from hlo_doctor.opstats.export_json import from_json, run_info_from_dict, run_info_to_dict, to_json
from hlo_doctor.opstats.schema import OpStats
from hlo_doctor.opstats.validate import check_opstats
from hlo_doctor.trace import find_xplanes, program_id_of, read_trace, xprof_hlo_stats
from hlo_doctor.trace.locate import display_path, locate_capture
from hlo_doctor.trace.trace_json import is_trace_json, read_trace_json

__all__ = ["from_json", "load_opstats", "op_texts_from_xprof", "read_run_info", "run_info_for", "run_info_from_dict",
           "run_info_to_dict", "csv_safe", "to_csv", "to_json", "write_exports"]


def to_csv(table: pd.DataFrame) -> str:
    """The table as CSV (columns :data:`COLUMN_NAMES`); a text cell a spreadsheet would run as a formula
    (``=...``, ``+``, ``-``, ``@``) starts with ``'``, and control characters are shown (``csv_cell``)."""
    return str(csv_safe(table).to_csv(index=False, float_format="%.3f"))


def csv_safe(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with :func:`~hlo_doctor.core.escape.csv.csv_cell` on each text cell that needs it (a copy
    only when one does)."""
    out = table
    for name in table.columns:
        col = table[name]
        if pd.api.types.is_numeric_dtype(col.dtype) or pd.api.types.is_bool_dtype(col.dtype):
            continue
        texts = col.map(lambda v: isinstance(v, str) and v != csv_cell(v))
        if texts.any():
            if out is table:
                out = table.copy()
            out[name] = col.map(lambda v: csv_cell(v) if isinstance(v, str) else v)
    return out


def write_exports(stats: OpStats, directory: Path) -> tuple[Path, Path]:
    """Write ``opstats.csv`` and ``opstats.json`` into ``directory``; return their paths."""
    csv_path = directory / "opstats.csv"
    json_path = directory / "opstats.json"
    for path, text in ((csv_path, to_csv(stats.table)), (json_path, to_json(stats))):
        write_atomically(path, text, hint="choose a writable --out folder")
    return csv_path, json_path


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

def _run_json_for(xplanes: list[Path], given: Path) -> Path | None:
    """``run.json`` of the run directory holding these xplanes, if any."""
    candidates = [given / "run.json"] if given.is_dir() else []
    for p in xplanes[:1]:
        # <run dir>/plugins/profile/<run>/<host>.xplane.pb
        if len(p.parents) >= 4:
            candidates.append(p.parents[3] / "run.json")
    return next((c for c in candidates if c.is_file()), None)


def read_run_info(path: Path) -> RunInfo | None:
    """The ``RunInfo`` in a ``run.json``; None when it cannot be read (the trace still is)."""
    try:
        return run_info_from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return None


def load_opstats(path: str | Path) -> OpStats:
    """The op-stats of a capture.

    ``path``: a run directory (from ``hlo-doctor profile``, or any xprof/TensorBoard log directory
    with ``plugins/profile/<run>/*.xplane.pb``, one file per host), a folder holding several
    captures with a baseline (``doctor``'s, ``verify``'s: :func:`~hlo_doctor.trace.locate.locate_capture`),
    a folder with an ``opstats.json`` export and no xplane, a bare ``.xplane.pb``, a trace
    JSON (``<host>.trace.json.gz``, ``perfetto_trace.json.gz``: no modules) or an ``opstats.json``
    or ``.parquet`` export (then ``modules`` is empty). Raises :class:`InputError` for bad input.
    """
    p = Path(path)
    if p.is_file() and is_trace_json(p):
        run_json = _run_json_for([p], p)
        run = read_run_info(run_json) if run_json is not None else None
        return _captured(check_opstats(build_opstats(read_trace_json([p]), run=run, source_path=str(p)), str(p)), [p])
    if p.is_file() and p.suffix.lower() == ".parquet":
        from hlo_doctor.opstats.parquet import from_parquet

        # The per-step samples come from the Parquet columns, not the checked JSON: checked here like
        # every other table (a NaN sample must never let the gate pass a regression).
        return _captured(check_opstats(from_parquet(p), str(p)), [p])
    if p.is_file() and p.suffix == ".json":
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{p}: cannot read ({exc})", "pass an opstats.json written by hlo-doctor") from exc
        return _captured(from_json(text, origin=str(p)), [p])
    if p.is_file() and not p.name.endswith(".pb"):
        raise InputError(f"{p}: not an .xplane.pb, trace JSON, opstats.json or .parquet export",
                         "pass a run directory, an .xplane.pb file, a .trace.json.gz or an opstats.json export")
    if p.is_dir():
        where = locate_capture(p)
        if where.kind == "export":
            return load_opstats(where.files[0])
        if where.kind == "hlo":
            raise InputError(f"{p}: HLO text only, no trace: no op times to tabulate",
                             "pass a run directory, an .xplane.pb or an opstats.json export "
                             "('hlo-doctor diagnose' reads HLO text)")
        p = where.path
    xplanes = find_xplanes(p)
    warm_printer()  # XLA's printer starts (imports jaxlib) while the events are read
    trace = read_trace(xplanes)
    run = run_info_for(xplanes, p)
    # A device trace without its HLO modules: xprof's hlo_stats has each op's HLO text (it is empty
    # for XLA:CPU traces, so it is not asked there).
    texts = op_texts_from_xprof(xplanes) if trace.backend != "cpu" and not trace.module_protos else []
    return _captured(check_opstats(build_opstats(trace, run=run, source_path=str(p), op_texts=texts), str(p)), xplanes)


def _captured(stats: OpStats, files: list[Path]) -> OpStats:
    """``stats`` with the files it was read from (relative to the working folder)."""
    return dataclasses.replace(stats, capture=tuple(display_path(f) for f in files))


def run_info_for(xplanes: list[Path], given: Path) -> RunInfo | None:
    """The ``RunInfo`` of the run directory that holds these xplanes (``given`` was passed), if any."""
    run_json = _run_json_for(xplanes, given)
    return read_run_info(run_json) if run_json is not None else None


def op_texts_from_xprof(xplanes: list[Path]) -> list[tuple[str, int, str, str]]:
    """(module, program id, op, HLO text) of each op xprof's ``hlo_stats`` lists (module left empty)."""
    texts: list[tuple[str, int, str, str]] = []
    for row in xprof_hlo_stats(xplanes):
        pid = program_id_of(str(row.get("program_id", "")).strip())
        if pid is None:
            continue
        name, text = str(row.get("hlo_op_name", "")), str(row.get("hlo_op_expression", "") or "")
        if name and text:
            texts.append(("", pid, name, text))
    return texts
