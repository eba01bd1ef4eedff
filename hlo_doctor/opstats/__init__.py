"""The op-stats table: ONE pandas table keyed by (module, program id, op), with one column spec.

- :mod:`~hlo_doctor.opstats.schema`: :data:`COLUMNS` (units are in the names) and :class:`OpStats`;
- :mod:`~hlo_doctor.opstats.build`: trace -> table (docs/profile.md says how, for people);
- :mod:`~hlo_doctor.opstats.steps`: step boundaries; :mod:`~hlo_doctor.opstats.keys`: canonical keys;
- :mod:`~hlo_doctor.opstats.io`: JSON/CSV exports and :func:`load_opstats`, the one loader.

Steps come from the step annotations (``StepTraceAnnotation``) when the trace has them
(``step_source = "annotation"``); otherwise from the executions of the step's main module, the
module with the most op time (``step_source = "module-executions"``). ``pct_of_step`` =
``time_per_step_us`` / mean step wall time x 100: XLA:CPU runs independent ops of one program
concurrently, so the column can sum to more than 100 over the table.
"""

from __future__ import annotations

from hlo_doctor.hlo.categories import categorize
from hlo_doctor.opstats.build import build_opstats, modules_from_trace
from hlo_doctor.opstats.io import (
    from_json,
    load_opstats,
    read_run_info,
    run_info_from_dict,
    run_info_to_dict,
    to_csv,
    to_json,
    write_exports,
)
from hlo_doctor.opstats.keys import assign_canonical_keys
from hlo_doctor.opstats.optext import parse_op_text
from hlo_doctor.opstats.schema import (
    COLUMN_NAMES,
    COLUMNS,
    JSON_SCHEMA,
    PER_STEP_COLUMNS,
    Column,
    OpStats,
    empty_table,
    group_by_shape,
)
from hlo_doctor.trace import CompileEvent

__all__ = [
    "COLUMNS", "COLUMN_NAMES", "JSON_SCHEMA", "PER_STEP_COLUMNS", "Column", "CompileEvent", "OpStats",
    "assign_canonical_keys", "build_opstats", "categorize", "empty_table", "from_json", "group_by_shape",
    "load_opstats", "modules_from_trace", "parse_op_text", "read_run_info", "run_info_from_dict",
    "run_info_to_dict", "to_csv", "to_json", "write_exports",
]
