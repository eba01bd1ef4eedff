"""The one check every loaded op-stats table and value goes through before a stage sees it.

A hand-edited, truncated or foreign export (and, rarely, a damaged trace) can hold values that no
capture produces: a null or missing name, an integer past 64 bits, NaN or infinite times, negative
step counts or byte counts. Downstream arithmetic would turn them into a passing gate or "-1910%
recoverable"; here they become an :class:`InputError` naming the file and the field (exit 2).

:func:`check_export` checks the JSON document field by field before pandas sees it (types, nulls,
ranges, integer width); :func:`check_opstats` checks the finished :class:`OpStats`, whichever way it
was built (JSON export or xplane), so that the loaders share one definition of "sane".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.lazy import pd
from hlo_doctor.opstats.schema import COLUMNS, PER_STEP_COLUMNS, OpStats, TableLater

INT_MAX = 2**63 - 1
"""Counts and byte sizes are stored as int64: anything wider is not a value this tool wrote."""
PROGRAM_ID_MAX = 2**64 - 1
"""Program ids are uint64 (libtpu writes ids above 2**63)."""

_HINT = "re-export it with 'hlo-doctor stats RUN --format json', or fix the value by hand"
# Names an op cannot be found without: null or missing is not a table this tool wrote.
_REQUIRED_TEXT = frozenset({"module", "op"})


def _bad(origin: str, where: str, what: str) -> InputError:
    return InputError(f"{origin}: malformed opstats export: {where}: {what}", _HINT)


def _int(origin: str, where: str, value: Any, *, maximum: int = INT_MAX) -> int:
    # bool is an int subclass in Python, but true/false is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(origin, where, f"{value!r} is not an integer")
    if not 0 <= value <= maximum:
        raise _bad(origin, where, f"{value} is out of range (an integer from 0 to "
                                  f"{'2^64-1' if maximum == PROGRAM_ID_MAX else '2^63-1'})")
    return value


def _program_id(origin: str, where: str, value: Any) -> None:
    # null is what the builder writes for an op the trace gave no program id (its -1 sentinel).
    if value is not None:
        _int(origin, where, value, maximum=PROGRAM_ID_MAX)


def _number(origin: str, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(origin, where, f"{value!r} is not a number")
    if isinstance(value, int) and abs(value) > INT_MAX:
        raise _bad(origin, where, f"{value} is out of range")
    number = float(value)
    if not math.isfinite(number):
        raise _bad(origin, where, f"{value} is not finite")
    if number < 0:
        raise _bad(origin, where, f"{value} is negative")
    return number


def _text(origin: str, where: str, value: Any, *, required: bool) -> None:
    if value is None and not required:
        return
    # "" is allowed even where required: the builder writes it for a trace that names no module.
    if not isinstance(value, str):
        raise _bad(origin, where, f"{value!r} is not a string")


def _list(origin: str, where: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _bad(origin, where, f"expected a list, got {type(value).__name__}")
    return value


def _check_row(origin: str, i: int, row: Any) -> None:
    if not isinstance(row, Mapping):
        raise _bad(origin, f"rows[{i}]", f"expected an object, got {type(row).__name__}")
    for column in COLUMNS:
        where = f"rows[{i}].{column.name}"
        if column.name not in row:
            if column.name in _REQUIRED_TEXT:
                raise _bad(origin, where, "missing")
            continue  # an older export without a later column: the loader fills it in
        value = row[column.name]
        if column.nullable and value is None:
            continue  # unknown (a roofline value without a peak or a FLOP count): null is its value
        if column.name == "program_id":
            _program_id(origin, where, value)
        elif column.dtype == "int64":
            _int(origin, where, value)
        elif column.dtype == "float64":
            _number(origin, where, value)
        else:
            _text(origin, where, value, required=column.name in _REQUIRED_TEXT)


def _check_per_step(origin: str, per_step: Any) -> None:
    if not isinstance(per_step, Mapping):
        raise _bad(origin, "per_step", f"expected an object, got {type(per_step).__name__}")
    for i, row in enumerate(_list(origin, "per_step.rows", per_step.get("rows", []))):
        where = f"per_step.rows[{i}]"
        if not isinstance(row, list) or len(row) != len(PER_STEP_COLUMNS):
            raise _bad(origin, where, f"expected a list of {len(PER_STEP_COLUMNS)} values "
                                      f"({', '.join(PER_STEP_COLUMNS)})")
        step, module, program_id, op, key, time_us = row
        _int(origin, f"{where}.step", step)
        _text(origin, f"{where}.module", module, required=True)
        _program_id(origin, f"{where}.program_id", program_id)
        _text(origin, f"{where}.op", op, required=True)
        _text(origin, f"{where}.canonical_key", key, required=False)
        _number(origin, f"{where}.time_us", time_us)


def check_export(doc: Mapping[str, Any], origin: str) -> None:
    """Check an opstats.json document (already parsed) before it is turned into tables.

    Raises:
        InputError: naming ``origin`` and the first bad field, e.g. ``rows[0].total_time_us: nan is not
            finite``.
    """
    _int(origin, "num_steps", doc.get("num_steps", 0))
    _number(origin, "step_time_us", doc.get("step_time_us", 0.0))
    for i, t in enumerate(_list(origin, "step_times_us", doc.get("step_times_us", []))):
        _number(origin, f"step_times_us[{i}]", t)
    for i, row in enumerate(_list(origin, "rows", doc.get("rows", []))):
        _check_row(origin, i, row)
    _check_per_step(origin, doc.get("per_step", {}))
    for key in ("compile_events", "warnings"):
        _list(origin, key, doc.get(key, []))
    for key in ("run", "versions"):
        value = doc.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise _bad(origin, key, f"expected an object, got {type(value).__name__}")
    run = doc.get("run") or {}
    for key in ("steps", "warmup"):
        if run.get(key) is not None:
            _int(origin, f"run.{key}", run[key])


def check_opstats(stats: OpStats, origin: str) -> OpStats:
    """Check a finished :class:`OpStats` (from any loader); return it unchanged.

    Numeric columns must be finite and non-negative, ``module`` and ``op`` not null; the step count
    and step times likewise. ``program_id`` may be missing here: a trace can carry ops whose program
    is unknown (the builder leaves it empty then).

    Raises:
        InputError: naming ``origin``, the column and the first offending row.
    """
    if stats.num_steps < 0:
        raise _bad(origin, "num_steps", f"{stats.num_steps} is negative")
    _number(origin, "step_time_us", stats.step_time_us)
    # One step time a device and step: a pod's are millions; each is named only where it is bad.
    for i, t in enumerate(stats.step_times_us):
        if type(t) is not float or not 0.0 <= t < math.inf:
            _number(origin, f"step_times_us[{i}]", t)
    numeric = [c.name for c in COLUMNS if c.dtype != "string"]
    nullable = {c.name for c in COLUMNS if c.nullable}
    frames: list[tuple[pd.DataFrame, str]] = []
    if isinstance(stats.table_data, TableLater):
        # Rows not yet a frame are checked as rows, with the frame's rules: the check loads no pandas.
        _check_records(stats.records(), origin, "rows", numeric, nullable=nullable)
    else:
        _check_frame(stats.table, origin, "rows", numeric, nullable=nullable)
        frames.append((stats.table, "rows"))
    # (A per-step frame still to be built from a table's sums is checked by nothing: it is built from
    # numbers this checks, and building it here would be the cost its deferral saves.)
    if stats.per_step_built:
        _check_frame(stats.per_step, origin, "per_step.rows", ["step", "time_us"], nullable=set())
        frames.append((stats.per_step, "per_step.rows"))
    for frame, where in frames:
        for column in _REQUIRED_TEXT:
            if column in frame and len(frame):
                empty = frame[column].isna().to_numpy(dtype=bool)
                if bool(empty.any()):
                    row = int(np.flatnonzero(empty)[0])
                    raise _bad(origin, f"{where}[{row}].{column}", "missing")
    return stats


def _check_records(records: list[dict[str, Any]], origin: str, where: str, columns: list[str], *,
                   nullable: set[str]) -> None:
    """:func:`_check_frame`'s rules (and the required text's) on rows as :meth:`OpStats.records`
    gives them: each value typed as the frame's column would hold it."""
    for name in columns:  # (column by column, then the text, as the frame's check finds the first)
        for i, record in enumerate(records):
            value = record.get(name)
            if value is None:
                if name in nullable or name == "program_id":
                    continue
                raise _bad(origin, f"{where}[{i}].{name}", f"{value} is not a finite number >= 0")
            number = float(value)
            known = not math.isnan(number) if name in nullable else True
            if (known and not math.isfinite(number)) or number < 0:
                raise _bad(origin, f"{where}[{i}].{name}", f"{value} is not a finite number >= 0")
    for column in _REQUIRED_TEXT:
        for i, record in enumerate(records):
            if record.get(column) is None:
                raise _bad(origin, f"{where}[{i}].{column}", "missing")


def _check_frame(frame: pd.DataFrame, origin: str, where: str, columns: list[str], *,
                 nullable: set[str]) -> None:
    for name in columns:
        if name not in frame or not len(frame):
            continue
        values = pd.to_numeric(frame[name], errors="coerce").astype("float64")
        nulls = frame[name].isna().to_numpy(dtype=bool)
        array = values.to_numpy(dtype=np.float64, na_value=np.nan)
        # A null program id or roofline value is "unknown" (allowed); any other null, NaN, inf or
        # negative is not.
        known = ~(np.isnan(array) | nulls) if name in nullable else ~nulls if name == "program_id" else \
            np.ones(len(array), bool)
        bad = (~np.isfinite(array) & known) | (array < 0)
        if bool(bad.any()):
            row = int(np.flatnonzero(bad)[0])
            raise _bad(origin, f"{where}[{row}].{name}", f"{frame[name].iloc[row]} is not a finite number >= 0")
