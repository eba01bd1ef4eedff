"""Reading and writing op stats: JSON and CSV exports, ``RunInfo`` as a dict, and the one loader
that takes a run directory, an xplane or an export."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import RunInfo
from hlo_doctor.opstats.build import build_opstats
from hlo_doctor.opstats.export_json import from_json, run_info_from_dict, run_info_to_dict, to_json
from hlo_doctor.opstats.schema import OpStats
from hlo_doctor.opstats.validate import check_opstats
from hlo_doctor.trace import find_xplanes, program_id_of, read_trace, xprof_hlo_stats
from hlo_doctor.trace.trace_json import is_trace_json, read_trace_json

__all__ = ["from_json", "load_opstats", "op_texts_from_xprof", "read_run_info", "run_info_for", "run_info_from_dict",
           "run_info_to_dict", "to_csv", "to_json", "write_exports"]


def to_csv(table: pd.DataFrame) -> str:
    """The table as CSV (columns :data:`COLUMN_NAMES`)."""
    return str(table.to_csv(index=False, float_format="%.3f"))


def write_exports(stats: OpStats, directory: Path) -> tuple[Path, Path]:
    """Write ``opstats.csv`` and ``opstats.json`` into ``directory``; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    csv_path = directory / "opstats.csv"
    json_path = directory / "opstats.json"
    for path, text in ((csv_path, to_csv(stats.table)), (json_path, to_json(stats))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
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
    with ``plugins/profile/<run>/*.xplane.pb``, one file per host), a bare ``.xplane.pb``, a trace
    JSON (``<host>.trace.json.gz``, ``perfetto_trace.json.gz``: no modules) or an ``opstats.json``
    or ``.parquet`` export (then ``modules`` is empty). Raises :class:`InputError` for bad input.
    """
    p = Path(path)
    if p.is_file() and is_trace_json(p):
        run_json = _run_json_for([p], p)
        run = read_run_info(run_json) if run_json is not None else None
        return check_opstats(build_opstats(read_trace_json([p]), run=run, source_path=str(p)), str(p))
    if p.is_file() and p.suffix.lower() == ".parquet":
        from hlo_doctor.opstats.parquet import from_parquet

        return from_parquet(p)
    if p.is_file() and p.suffix == ".json":
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{p}: cannot read ({exc})", "pass an opstats.json written by hlo-doctor") from exc
        return from_json(text, origin=str(p))
    if p.is_file() and not p.name.endswith(".pb"):
        raise InputError(f"{p}: not an .xplane.pb, trace JSON, opstats.json or .parquet export",
                         "pass a run directory, an .xplane.pb file, a .trace.json.gz or an opstats.json export")
    xplanes = find_xplanes(p)
    trace = read_trace(xplanes)
    run = run_info_for(xplanes, p)
    # A device trace without its HLO modules: xprof's hlo_stats has each op's HLO text (it is empty
    # for XLA:CPU traces, so it is not asked there).
    texts = op_texts_from_xprof(xplanes) if trace.backend != "cpu" and not trace.module_protos else []
    return check_opstats(build_opstats(trace, run=run, source_path=str(p), op_texts=texts), str(p))


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
