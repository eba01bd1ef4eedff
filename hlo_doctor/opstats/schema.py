"""The op-stats table's one column spec (:data:`COLUMNS`) and :class:`OpStats`, what a build gives.

Every stage that reads or writes op stats uses :data:`COLUMNS`; units are in the names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hlo_doctor.core.lazy import pd
from hlo_doctor.core.loaded import is_pandas_na
from hlo_doctor.core.model import RunInfo
from hlo_doctor.hlo import HloModule
from hlo_doctor.opstats.breakdown import StepBreakdown
from hlo_doctor.opstats.per_step import (
    PER_STEP_COLUMNS as PER_STEP_COLUMNS,  # (re-exported: the schema names it)
)
from hlo_doctor.opstats.per_step import PerStepLater, built
from hlo_doctor.trace import CompileEvent
from hlo_doctor.trace.peaks import DevicePeaks

JSON_SCHEMA = "hlo-doctor.opstats/1"
"""The ``schema`` tag of an opstats.json (exports before it carry the same value under ``format``)."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the op-stats table."""

    name: str
    dtype: str
    """pandas dtype."""
    unit: str
    meaning: str
    nullable: bool = False
    """The value may be unknown: NaN (a number) or empty (text) in the table, null in JSON, blank in
    CSV and tables."""


COLUMNS: tuple[Column, ...] = (
    Column("rank", "int64", "", "1 = most time per step"),
    Column("program_id", "object", "",
           "XLA program id of the module (changes across recompiles): a Python int, uint64 (libtpu's "
           "exceed 2**63, so not int64), None when the trace does not say"),
    Column("module", "string", "", "HLO module name as the trace names it (jit_sample)"),
    Column("op", "string", "", "HLO instruction name (copy.2, iota_reduce_fusion)"),
    Column("opcode", "string", "", "HLO opcode (copy, fusion, convert...)"),
    Column("category", "string", "",
           "what the op does: convert, copy, reduce, matmul, elementwise, data-movement, collective, "
           "custom-call, other"),
    Column("shape", "string", "", "result shape as HLO writes it: f32[512,256000]{1,0}"),
    Column("operand_shapes", "string", "", "operand shapes, '; '-separated"),
    Column("occurrences", "int64", "count", "op events in the trace"),
    Column("total_time_us", "float64", "us", "sum of the op's event durations (all devices)"),
    Column("avg_time_us", "float64", "us", "total_time_us / occurrences"),
    Column("time_per_step_us", "float64", "us", "total_time_us / number of steps / devices"),
    Column("pct_of_step", "float64", "%", "time_per_step_us over the mean step wall time, x100"),
    Column("bytes_read", "int64", "bytes", "sum of operand sizes (from the shapes)"),
    Column("bytes_written", "int64", "bytes", "result size (from the shape)"),
    Column("bytes_accessed", "int64", "bytes", "bytes_read + bytes_written"),
    Column("op_name", "string", "", "HLO metadata op_name (jit(sample)/reduce)"),
    Column("source", "string", "", "file:line from the HLO metadata"),
    Column("canonical_key", "string", "",
           "key stable across recompiles: module name without program id | opcode | shape "
           "[#disambiguator]"),
    Column("self_time_us", "float64", "us",
           "total_time_us minus op events nested inside this op's events on the same thread/stream"),
    Column("devices", "int64", "count", "devices (device planes, or hosts on XLA:CPU) the op ran on"),
    Column("runs_per_step", "float64", "count",
           "runs of the op per device per step: occurrences / number of steps / devices"),
    # The roofline (hlo_doctor.opstats.roofline): unknown values stay NaN, never a guess.
    Column("cost_bytes_per_run", "float64", "bytes",
           "bytes one run moves as XLA's cost analysis counts them (the trace's bytes_accessed, else the "
           "HLO: fusion inputs read as far as used, an in-place update writes only the update)", True),
    Column("flops_per_run", "float64", "FLOP",
           "FLOPs of one run: the trace's flops stat, else counted from the HLO as xprof counts them "
           "(dots and convolutions 2 per multiply-add; on GPU also elementwise ops and reductions, "
           "and an op whose widest input is 8 bits at half, 4 bits a quarter); unknown for an op "
           "without either", True),
    Column("memory_bw_gibps", "float64", "GiB/s",
           "achieved memory bandwidth: cost_bytes_per_run x occurrences / total_time_us (xprof's "
           "measured memory BW)", True),
    Column("flop_rate_gflops", "float64", "GFLOP/s", "flops_per_run x occurrences / total_time_us", True),
    Column("intensity_flop_per_byte", "float64", "FLOP/byte",
           "operational intensity: flops_per_run / cost_bytes_per_run", True),
    Column("pct_of_peak_bw", "float64", "%",
           "memory_bw_gibps over the device's peak HBM bandwidth, x100 (unknown peak: NaN)", True),
    Column("pct_of_peak_flops", "float64", "%",
           "flop_rate_gflops over the device's peak FLOP/s, x100 (unknown peak: NaN)", True),
    Column("bound_by", "string", "",
           "memory or compute: the resource the op uses the larger share of (intensity below or above "
           "the device's ridge point); memory for an op without matrix FLOPs; empty when a peak is unknown",
           True),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)


@dataclass(frozen=True, slots=True)
class OpStats:
    """The op-stats table of one capture and what it was built from."""

    table_data: pd.DataFrame | TableLater
    """:attr:`table`, or its rows until the frame is first read (:class:`TableLater`)."""
    step_time_us: float
    """Mean step wall time."""
    step_times_us: Sequence[float]
    """Wall time of each step (all hosts): a :class:`~hlo_doctor.opstats.step_times.StepTimes` (one
    float64 array; a tuple where an export was read)."""
    num_steps: int
    step_source: str
    """``annotation`` (step marks in the trace) or ``module-executions``."""
    per_step_data: pd.DataFrame | PerStepLater
    """:attr:`per_step`, or what builds it the first time it is read (a table built from sums:
    :mod:`hlo_doctor.opstats.per_step`)."""
    modules: tuple[HloModule, ...]
    """HLO modules from the trace's metadata plane (``program_id`` set); empty from a JSON export."""
    compile_events: tuple[CompileEvent, ...]
    backend: str
    run: RunInfo | None
    source_path: str
    device_kind: str = ""
    warnings: tuple[str, ...] = ()
    """Things the reader worked around (a module it could not parse...), one line each."""
    versions: tuple[tuple[str, str], ...] = field(default=())
    num_devices: int = 0
    """Devices the trace's op events ran on (device planes, or hosts on XLA:CPU); 0 when unknown
    (an export from an earlier release)."""
    peaks: DevicePeaks | None = None
    """The device's peak FLOP/s and HBM bandwidth the roofline columns use; None when unknown (XLA:CPU)."""
    breakdown: StepBreakdown | None = None
    """Where each step's wall time goes per device (busy, idle, what the host did meanwhile:
    :mod:`hlo_doctor.opstats.breakdown`); None in an export from before it."""
    hosts_left_out: tuple[tuple[str, str], ...] = ()
    """(host file, why) of each host file of the capture the table leaves out (``--skip-bad-hosts``):
    the table is of the other hosts only."""
    capture: tuple[str, ...] = ()
    """The files the table was read from, relative to the working folder of the command that read
    them (each host's xplane, or the export); empty where no command said."""

    @property
    def table(self) -> pd.DataFrame:
        """Columns: :data:`COLUMN_NAMES`; one row per (module, program_id, op), sorted by rank. Built
        from the rows the first time it is read, then kept (loading pandas then, not before)."""
        data = self.table_data
        if isinstance(data, TableLater):
            data = data()
            object.__setattr__(self, "table_data", data)
        return data

    def records(self) -> list[dict[str, Any]]:
        """The table's rows as dicts in :data:`COLUMN_NAMES` order with the table's values
        (``table.to_dict(orient="records")``), read from the rows where the frame is not built yet:
        an export of the table, or the table people read, needs no pandas (kept: not to be changed)."""
        data = self.table_data
        if isinstance(data, TableLater):
            return data.records()
        records: list[dict[str, Any]] = data.to_dict(orient="records")
        return records

    @property
    def per_step(self) -> pd.DataFrame:
        """Columns: :data:`PER_STEP_COLUMNS` (per-step op time samples, for gate statistics); built
        here the first time it is read, then kept."""
        frame: pd.DataFrame = built(self)
        return frame

    @property
    def per_step_built(self) -> bool:
        """Whether :attr:`per_step` exists as a frame yet (reading it builds it)."""
        return not isinstance(self.per_step_data, PerStepLater)

    def module(self, name: str, program_id: int | None = None) -> HloModule | None:
        """The module with this name (and program id, when given)."""
        for m in self.modules:
            if m.name == name and (program_id is None or m.program_id == program_id):
                return m
        return None


def empty_table() -> pd.DataFrame:
    """An op-stats table with no rows and the right dtypes. Columns: :data:`COLUMN_NAMES`."""
    return pd.DataFrame({c.name: pd.Series([], dtype=c.dtype) for c in COLUMNS})


def program_id_or_none(value: object) -> int | None:
    """A program id as a Python int (exact for uint64), or None for a missing one (None, NaN, NA)."""
    if value is None or is_pandas_na(value) or (isinstance(value, float) and np.isnan(value)):
        return None
    return int(value)  # type: ignore[call-overload]


class TableLater:
    """The op-stats table's rows (one dict per row, keys :data:`COLUMN_NAMES`) before the frame: the
    frame is made when called (:func:`table_from_rows`); :meth:`records` gives the values the frame
    would hold without making it."""

    __slots__ = ("rows", "_records")

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self._records: list[dict[str, Any]] | None = None

    def __call__(self) -> pd.DataFrame:
        return table_from_rows(self.rows)

    def records(self) -> list[dict[str, Any]]:
        """Each row in :data:`COLUMN_NAMES` order, each value as :func:`with_column_dtypes` types it:
        ``int64`` an int, ``float64`` a float (missing: NaN), ``string`` a str (missing: empty where
        the column is nullable, else None), ``object`` a program id or None."""
        if self._records is None:
            typers = [(c.name, _TYPERS[c.dtype] if not (c.nullable and c.dtype == "string") else _nullable_text)
                      for c in COLUMNS]
            self._records = [{name: typer(row.get(name)) for name, typer in typers} for row in self.rows]
        return self._records


def _text(value: object) -> str | None:
    if value is None or is_pandas_na(value) or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


def _nullable_text(value: object) -> str:
    return _text(value) or ""


def _number(value: object) -> float:
    return math.nan if value is None or is_pandas_na(value) else float(value)  # type: ignore[arg-type]


_TYPERS: dict[str, Any] = {"int64": int, "float64": _number, "string": _text, "object": program_id_or_none}
"""Per dtype of :data:`COLUMNS`, a row's value as the typed frame holds it."""


def table_from_rows(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The table from one dict per row (keys: :data:`COLUMN_NAMES`), with the dtypes of :data:`COLUMNS`."""
    if not rows:
        return empty_table()
    table = pd.DataFrame(rows, columns=list(COLUMN_NAMES))
    for c in COLUMNS:
        if c.dtype == "object":
            # pandas reads ints next to a None as float64, which cannot hold a uint64 id above 2**53:
            # the column is built again from the rows' own Python ints.
            table[c.name] = pd.Series([row.get(c.name) for row in rows], dtype=object, index=table.index)
    return with_column_dtypes(table)


def with_column_dtypes(table: pd.DataFrame) -> pd.DataFrame:
    """The table with the dtypes of :data:`COLUMNS` (program ids: Python ints or None)."""
    for c in COLUMNS:
        if c.name not in table:
            # An export from before the column existed.
            table[c.name] = (pd.Series([None] * len(table), dtype=object) if c.dtype == "object"
                             else np.nan if c.nullable else "" if c.dtype == "string" else 0)
        if c.dtype == "object":
            table[c.name] = pd.Series([program_id_or_none(v) for v in table[c.name]], dtype=object,
                                      index=table.index)
        else:
            table[c.name] = table[c.name].astype(c.dtype)
        if c.nullable and c.dtype == "string":
            table[c.name] = table[c.name].fillna("")
    return table.reset_index(drop=True)


def group_by_shape(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of the table aggregated by (opcode, category, shape): a fusion's opcode is shared by a
    standalone convert and a matmul of one shape, so the category is part of the key and every
    group's label is its own rows' (never the first row's of another kind).

    Columns: rank, opcode, shape, category, ops (how many table rows), occurrences, total_time_us,
    time_per_step_us, pct_of_step, bytes_accessed, modules ('; '-separated).
    """
    if table.empty:
        return pd.DataFrame(columns=["rank", "opcode", "shape", "category", "ops", "occurrences",
                                     "total_time_us", "time_per_step_us", "pct_of_step",
                                     "bytes_accessed", "modules"])
    key = table["opcode"].where(table["opcode"] != "", table["op"])
    g = table.assign(_opcode=key, _category=table["category"].astype(str)).groupby(
        ["_opcode", "_category", "shape"], sort=False, observed=True)
    out = g.agg(
        ops=("op", "size"), occurrences=("occurrences", "sum"),
        total_time_us=("total_time_us", "sum"), time_per_step_us=("time_per_step_us", "sum"),
        pct_of_step=("pct_of_step", "sum"), bytes_accessed=("bytes_accessed", "sum"),
        modules=("module", lambda s: "; ".join(sorted(set(map(str, s))))),
    ).reset_index().rename(columns={"_opcode": "opcode", "_category": "category"})
    out = out[["opcode", "shape", "category", *(c for c in out.columns if c not in ("opcode", "category", "shape"))]]
    out = out.sort_values(["time_per_step_us", "opcode", "category", "shape"], ascending=[False, True, True, True])
    out.insert(0, "rank", range(1, len(out) + 1))
    return out.reset_index(drop=True)
