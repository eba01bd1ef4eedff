"""The op-stats table: ONE pandas table keyed by (module, op), with one column spec.

Every stage that reads or writes op stats uses :data:`COLUMNS`; units are in the names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    dtype: str
    """pandas dtype."""
    unit: str
    meaning: str


COLUMNS: tuple[Column, ...] = (
    Column("rank", "int64", "", "1 = most time per step"),
    Column("program_id", "Int64", "", "XLA program id of the module (changes across recompiles)"),
    Column("module", "string", "", "HLO module name as the trace names it (jit_sample)"),
    Column("op", "string", "", "HLO instruction name (copy.2, iota_reduce_fusion)"),
    Column("opcode", "string", "", "HLO opcode (copy, fusion, convert...)"),
    Column("category", "string", "", "what the op does: convert, copy, reduce, matmul, elementwise, ..."),
    Column("shape", "string", "", "result shape as HLO writes it: f32[512,256000]{1,0}"),
    Column("operand_shapes", "string", "", "operand shapes, '; '-separated"),
    Column("occurrences", "int64", "count", "op events in the trace"),
    Column("total_time_us", "float64", "us", "sum of the op's event durations"),
    Column("avg_time_us", "float64", "us", "total_time_us / occurrences"),
    Column("time_per_step_us", "float64", "us", "total_time_us / number of steps"),
    Column("pct_of_step", "float64", "%", "time_per_step_us over the mean step wall time, x100"),
    Column("bytes_read", "int64", "bytes", "sum of operand sizes (from the shapes)"),
    Column("bytes_written", "int64", "bytes", "result size (from the shape)"),
    Column("bytes_accessed", "int64", "bytes", "bytes_read + bytes_written"),
    Column("op_name", "string", "", "HLO metadata op_name (jit(sample)/reduce)"),
    Column("source", "string", "", "file:line from the HLO metadata"),
    Column("canonical_key", "string", "",
           "key stable across recompiles: module name without program id | opcode | shape"),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
