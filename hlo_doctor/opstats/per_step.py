"""The per-step op times of a table (:attr:`~hlo_doctor.opstats.schema.OpStats.per_step`), built
when a command first reads them.

One row per (op, step) is millions of rows for a long capture (148 ops x 5,537 steps: 819,476 rows,
three of their columns strings). ``stats``, ``diagnose`` without a rule that reads them, and the
gate's own samples never do; the build from the sums takes 0.2-0.4 s and 40 MiB there. So a table
built from sums holds a :class:`PerStepLater`, which keeps the sums' per-step grid (no copy) and the
rows' keys, and :attr:`OpStats.per_step` builds the frame the first time it is read: the same frame,
column for column, as building it at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hlo_doctor.core.lazy import pd

PER_STEP_COLUMNS: tuple[str, ...] = ("step", "module", "program_id", "op", "canonical_key", "time_us")
"""Columns of :attr:`OpStats.per_step`: one row per (step, op); ``time_us`` is the op's time in that
step (per device), 0 when it did not run in that step."""

_DTYPES = {"step": "int64", "module": "string", "program_id": "object", "op": "string",
           "canonical_key": "string", "time_us": "float64"}


def empty_per_step() -> pd.DataFrame:
    """A per-step frame without rows, with its columns' dtypes."""
    return pd.DataFrame({c: pd.Series([], dtype=_DTYPES[c]) for c in PER_STEP_COLUMNS})


@dataclass(frozen=True, slots=True)
class PerStepLater:
    """What :attr:`OpStats.per_step` is built from, when it is first read: the sums' steps and
    per-step grid (one row per op group, ns summed over devices) and, per table row in rank order,
    (group, devices, module, program id, op, canonical key)."""

    steps: np.ndarray
    step_ns: np.ndarray
    rows: tuple[tuple[int, int, str, int | None, str, str], ...]

    @classmethod
    def of(cls, steps: np.ndarray, step_ns: np.ndarray, rows: list[dict[str, Any]]) -> PerStepLater:
        """From the sums' steps and grid and the table's rows (dicts, ranked)."""
        return cls(steps, step_ns, tuple((int(r["group"]), int(r["devices"]), r["module"], r["program_id"],
                                          r["op"], r["canonical_key"]) for r in rows))

    def _time_us(self) -> np.ndarray:
        """Each row's time per device in each step, row after row (the frame's ``time_us``): every
        (op, step) pair, so a step in which an op did not run counts as 0 for the statistics."""
        groups = np.asarray([r[0] for r in self.rows], np.int64)
        devices = np.asarray([r[1] for r in self.rows], np.float64)[:, None]
        return (self.step_ns[groups] / 1e3 / devices).ravel()

    def __call__(self) -> pd.DataFrame:
        """Per-step op time (per device) for every op of the table and every step; 0 where it did not run."""
        if not len(self.steps) or not self.rows:
            return empty_per_step()
        n = len(self.steps)
        return pd.DataFrame({
            "step": np.tile(self.steps.astype(np.int64), len(self.rows)),
            "module": _repeated_strings([r[2] for r in self.rows], n),
            "program_id": np.repeat(np.asarray([r[3] for r in self.rows] + [None], dtype=object)[:-1], n),
            "op": _repeated_strings([r[4] for r in self.rows], n),
            "canonical_key": _repeated_strings([r[5] for r in self.rows], n),
            "time_us": self._time_us().astype(np.float64, copy=False),
        }, copy=False)

    def samples_by_key(self) -> dict[str, np.ndarray]:
        """The per-step time of each canonical key, keys in sorted order (what the gate's
        :func:`~hlo_doctor.gate.match.per_op_samples` takes from the frame), from the sums alone:
        the same codes, cells and bincount, without a row of strings."""
        if not len(self.steps) or not self.rows:
            return {}
        names = sorted({r[5] for r in self.rows if isinstance(r[5], str)})
        at = {k: i for i, k in enumerate(names)}
        key_codes = np.repeat(np.asarray([at.get(r[5], -1) for r in self.rows], np.int64), len(self.steps))
        # (The frame's step column is the steps once per row: its codes are the steps' own, repeated.)
        uniq, codes = np.unique(self.steps.astype(np.int64), return_inverse=True)
        sums = key_step_sums(key_codes, len(names), np.tile(codes, len(self.rows)), len(uniq), self._time_us())
        return {k: sums[i] for i, k in enumerate(names)}


def built(owner: Any) -> Any:
    """``owner.per_step_data`` as the frame it stands for (an :class:`~hlo_doctor.opstats.schema.OpStats`
    or a lint ``Context``): a :class:`PerStepLater` is built the first time and kept in its place
    (set once, on a frozen owner, to what it stands for); a frame or None as it is."""
    data = owner.per_step_data
    if isinstance(data, PerStepLater):
        data = data()
        object.__setattr__(owner, "per_step_data", data)
    return data


def key_step_sums(key_codes: np.ndarray, keys: int, step_codes: np.ndarray, steps: int,
                  times: np.ndarray) -> np.ndarray:
    """(keys, steps) sums of ``times`` by each row's key and step code (codes below 0: no key, left
    out), added in row order: one bincount, not a group-by over strings."""
    keyed = key_codes >= 0
    cells = key_codes[keyed].astype(np.int64) * steps + step_codes[keyed]
    times = np.where(np.isnan(times[keyed]), 0.0, times[keyed])  # (a missing time adds nothing)
    return np.bincount(cells, weights=times, minlength=keys * steps).reshape(keys, steps)


def _repeated_strings(values: list[str], times: int) -> pd.Series:
    """``values``, each repeated ``times`` times, as a ``string`` column: where pandas keeps its
    strings in Arrow, written there straight from one copy of each (no Python string per row: a
    table of many steps is millions of rows)."""
    dtype = pd.StringDtype()
    if dtype.storage == "pyarrow" and values:
        import pyarrow as pa

        codes = pa.array(np.repeat(np.arange(len(values), dtype=np.int32), times))
        column = pa.DictionaryArray.from_arrays(codes, pa.array(values, pa.large_string())).cast(pa.large_string())
        return pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array([column])), dtype=dtype, copy=False)
    return pd.Series(np.repeat(np.asarray(values, dtype=object), times), dtype=dtype)
