"""The op-stats export as Parquet: the per-step matrix in columns, the rest of the export beside it.

The rows of the file are :attr:`~hlo_doctor.opstats.schema.OpStats.per_step` (one per step and op,
columns :data:`~hlo_doctor.opstats.schema.PER_STEP_COLUMNS`): what ``pandas.read_parquet`` gives.
The file's key-value metadata holds the rest: ``hlo-doctor.opstats``, the JSON export written
without its per-step samples (:func:`~hlo_doctor.opstats.io.to_json`: the table, the summaries),
with each step's wall time; and ``hlo-doctor.breakdown-steps``, the breakdown's slice of each
device and step as columns (JSON, zlib-compressed, base64). :func:`from_parquet` reads all of it back as
:func:`~hlo_doctor.opstats.io.from_json` reads a JSON export with ``--per-step``.

Parquet needs ``pyarrow``, the optional ``parquet`` extra: without it, writing or reading one is a
one-line error naming the extra.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from hlo_doctor.core.atomic import file_mode
from hlo_doctor.core.errors import InputError, NotAvailableError
from hlo_doctor.core.lazy import pd
from hlo_doctor.opstats.breakdown_steps import HOST_KINDS, SCALARS, SliceColumns, StepTable
from hlo_doctor.opstats.schema import PER_STEP_COLUMNS, OpStats
from hlo_doctor.opstats.step_times import float_list

EXTRA_HINT = "pip install 'hlo-doctor[parquet]' (or write --format json)"
META_OPSTATS = b"hlo-doctor.opstats"
META_STEPS = b"hlo-doctor.breakdown-steps"


def require_pyarrow() -> tuple[Any, Any]:
    """pyarrow's modules, or the one-line error naming the extra that brings them."""
    return _pyarrow()


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise NotAvailableError("Parquet needs the 'pyarrow' package, which is not installed", EXTRA_HINT) from None
    return pa, pq


def is_parquet(path: Path) -> bool:
    """A path named as a Parquet file (``.parquet``)."""
    return path.suffix.lower() == ".parquet"


def write_parquet(stats: OpStats, path: Path) -> Path:
    """Write ``stats`` to ``path`` (see the module's docstring), through a temporary file; the path."""
    from hlo_doctor.opstats.export_json import to_json

    pa, pq = _pyarrow()
    ps = stats.per_step
    # program_id is a uint64 (ids above 2**63): a nullable unsigned column, as the table's.
    pids = pa.array([None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else int(v)
                     for v in ps["program_id"].tolist()], pa.uint64())
    table = pa.table({
        "step": pa.array(ps["step"].to_numpy(np.int64)),
        "module": pa.array(ps["module"].astype(object).tolist(), pa.string()),
        "program_id": pids,
        "op": pa.array(ps["op"].astype(object).tolist(), pa.string()),
        "canonical_key": pa.array(ps["canonical_key"].astype(object).tolist(), pa.string()),
        "time_us": pa.array(ps["time_us"].to_numpy(np.float64)),
    })
    assert tuple(table.column_names) == PER_STEP_COLUMNS
    doc = json.loads(to_json(stats, per_step=False, compact=True))
    doc["step_times_us"] = float_list(stats.step_times_us)
    # (An export read without its samples has none to write.)
    doc["per_step_written"] = len(stats.per_step) > 0
    if doc.get("breakdown") is not None:
        doc["breakdown"]["steps"] = []  # its slices are the columns of META_STEPS
    meta = {META_OPSTATS: json.dumps(doc, separators=(",", ":")).encode()}
    if stats.breakdown is not None:
        # Compressed: Arrow keeps the file's metadata twice (as itself and inside its schema).
        meta[META_STEPS] = base64.b64encode(zlib.compress(
            json.dumps(_steps_doc(stats.breakdown.table), separators=(",", ":")).encode(), 6))
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    return _write(pq, table, Path(path))


def wants_parquet(fmt: str, output: Path | None) -> bool:
    """Whether a command's export is Parquet: ``--format parquet``, or ``-o FILE.parquet`` with the
    table or JSON format.

    Raises:
        InputError: ``--format parquet`` without a file to write (Parquet is no text for stdout).
    """
    if fmt == "parquet" and (output is None or str(output) == "-"):
        raise InputError("--format parquet writes a file, not stdout", "pass -o FILE.parquet")
    return fmt == "parquet" or (fmt in ("table", "json") and output is not None and is_parquet(output))


def _write(pq: Any, table: Any, path: Path) -> Path:
    """Whole or not at all: a temporary file beside ``path``, renamed over it."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, file_mode())  # the mode a new file gets under the user's umask, not mkstemp's 0600
        os.close(fd)
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})", "pass -o a file in a writable folder") from None
    finally:
        if tmp is not None:
            os.unlink(tmp)
    return path


def _steps_doc(steps: StepTable) -> dict[str, Any]:
    """The breakdown's slices as one object of columns per device."""
    return {"kinds": list(HOST_KINDS), "blocks": [
        {"host": b.host, "device": b.device, **{n: getattr(b, n).tolist() for n in SCALARS},
         "host_us": b.host_us.T.tolist(), "idle_by_kind": b.idle_by_kind.T.tolist()} for b in steps.blocks]}


def _steps_from(doc: dict[str, Any]) -> StepTable:
    kinds = list(doc.get("kinds", HOST_KINDS))

    def by_kind(columns: list[list[float]], n: int) -> np.ndarray:
        out = np.zeros((n, len(HOST_KINDS)))
        for k, col in zip(kinds, columns, strict=True):
            if k in HOST_KINDS:
                out[:, HOST_KINDS.index(k)] = col
        return out

    blocks = []
    for b in doc["blocks"]:
        n = len(b["step"])
        start, wall, busy, op = (np.asarray(b[name], np.float64) for name in SCALARS[1:])
        blocks.append(SliceColumns(str(b["host"]), str(b["device"]), np.asarray(b["step"], np.int64), start, wall,
                                   busy, op, by_kind(b["host_us"], n), by_kind(b["idle_by_kind"], n)))
    return StepTable(blocks)


def from_parquet(path: Path) -> OpStats:
    """Read an OpStats back from :func:`write_parquet`'s file (``modules`` is empty).

    Raises:
        InputError: not a Parquet file hlo-doctor wrote.
        NotAvailableError: without ``pyarrow``.
    """
    import dataclasses

    from hlo_doctor.opstats.export_json import from_json

    _, pq = _pyarrow()
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})",
                         "pass an export written by 'hlo-doctor stats RUN --format parquet'") from None
    meta = table.schema.metadata or {}
    if META_OPSTATS not in meta or tuple(table.column_names) != PER_STEP_COLUMNS:
        raise InputError(f"{path}: not an hlo-doctor opstats Parquet export",
                         "pass an export written by 'hlo-doctor stats RUN --format parquet'")
    stats = from_json(meta[META_OPSTATS].decode(), origin=str(path))
    breakdown = stats.breakdown
    if breakdown is not None and META_STEPS in meta:
        try:
            steps = json.loads(zlib.decompress(base64.b64decode(meta[META_STEPS])))
            breakdown = dataclasses.replace(breakdown, steps=_steps_from(steps))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, zlib.error) as exc:
            raise InputError(f"{path}: malformed breakdown slices in the opstats Parquet export "
                             f"({type(exc).__name__}: {exc})",
                             "re-export it with 'hlo-doctor stats RUN --format parquet'") from None
    pa, _ = _pyarrow()
    for name, is_type, what in (("step", pa.types.is_integer, "integers"), ("time_us", pa.types.is_floating, "floats")):
        if not is_type(table.schema.field(name).type):
            raise InputError(f"{path}: malformed opstats Parquet export: column {name} holds "
                             f"{table.schema.field(name).type}, not {what}",
                             "re-export it with 'hlo-doctor stats RUN --format parquet'")
    try:
        per_step = _per_step(table)
    except (ValueError, TypeError, OverflowError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"{path}: malformed per-step columns in the opstats Parquet export "
                         f"({type(exc).__name__}: {exc})",
                         "re-export it with 'hlo-doctor stats RUN --format parquet'") from None
    return dataclasses.replace(stats, per_step_data=per_step, breakdown=breakdown)


def _per_step(table: Any) -> pd.DataFrame:
    """The per-step frame with the dtypes :func:`~hlo_doctor.opstats.io.from_json` gives it."""
    cols = {name: table.column(name) for name in PER_STEP_COLUMNS}
    frame = pd.DataFrame({
        "step": pd.Series(cols["step"].to_numpy(), dtype="int64"),
        "module": pd.Series(cols["module"].to_pylist(), dtype="string"),
        "program_id": pd.Series(cols["program_id"].to_pylist(), dtype=object),
        "op": pd.Series(cols["op"].to_pylist(), dtype="string"),
        "canonical_key": pd.Series(cols["canonical_key"].to_pylist(), dtype="string"),
        "time_us": pd.Series(cols["time_us"].to_numpy(), dtype="float64"),
    })
    return frame[list(PER_STEP_COLUMNS)]
