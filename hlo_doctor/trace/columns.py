"""Op-event columns while a trace is read: codes into small vocabularies and numpy chunks.

A large device trace holds millions of op events over a few hundred distinct ops: each name is
stored once, each event as integer codes and float64 times, so memory grows by about 60 bytes per
event, not by a Python object per field.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hlo_doctor.trace.arrays import counts, searchsorted, unique_inverse, unique_values
from hlo_doctor.trace.cwire import nested_self_times
from hlo_doctor.trace.model import Coded, OpEvents

__all__ = ["OpColumns", "Vocabulary", "counts", "narrowest", "return_freed_memory", "searchsorted", "self_times",
           "trim_freed_memory", "unique_inverse", "unique_values"]

_WIDTH = 10


@dataclass(slots=True)
class Vocabulary:
    """Distinct values of a column, each with its code (the order of first use)."""

    codes: dict[Hashable, int] = field(default_factory=dict)
    values: list[Any] = field(default_factory=list)

    def code(self, value: Hashable) -> int:
        """The code of ``value`` (added on first use)."""
        c = self.codes.get(value)
        if c is None:
            c = self.codes[value] = len(self.values)
            self.values.append(value)
        return c

    def coded(self, codes: np.ndarray) -> Coded:
        """The column as codes into these values (kept as they are: ints stay Python ints)."""
        return Coded(codes, self.values)


def self_times(starts: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Durations minus the time of events nested inside each event (events of ONE line, sorted by
    start, longest first).

    Events on one line (thread, stream) are properly nested or disjoint, so a child's time is
    subtracted from its innermost enclosing event. Lines without nesting (the usual case) take one
    vectorized pass.
    """
    if len(starts) < 2 or bool(np.all(starts[:-1] + durations[:-1] <= starts[1:])):
        return durations  # nothing nested: the same array, not a copy
    walked = nested_self_times(starts, durations)
    if walked is not None:
        return walked
    out = durations.astype(np.float64, copy=True)
    stack: list[tuple[float, int]] = []  # (end, index into the line)
    for i, (start, dur) in enumerate(zip(starts.tolist(), durations.tolist(), strict=True)):
        end = start + dur
        while stack and stack[-1][0] <= start:
            stack.pop()
        if stack and end <= stack[-1][0]:
            out[stack[-1][1]] -= dur
        stack.append((end, i))
    return out


_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
_released: list[bool] = []


RELEASE_FROM_BYTES = 4 << 20
"""Freed arrays from this size go back to the system at once (:func:`return_freed_memory`)."""


def return_freed_memory() -> None:
    """Have the C allocator give a freed large array (:data:`RELEASE_FROM_BYTES` or more) back to the
    system at once (glibc: a fixed ``M_MMAP_THRESHOLD``; elsewhere nothing is done).

    By default glibc raises that threshold to the size of the last large block freed, so the
    columns of the next line of events (a few MiB each) are carved out of the heap, which the
    process then keeps: its resident memory stays at its high-water mark while the columns of a
    large trace are joined, summed and dropped. Smaller blocks stay on the heap: a fresh mapping
    per array costs a page fault per page (with the numpy decoder's many passes over each chunk,
    seconds of system time on a 100 MiB trace; it is not used there). Called once per process,
    before the first read."""
    if _released:
        return
    _released.append(True)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(_MMAP_THRESHOLD, RELEASE_FROM_BYTES)
    except (OSError, AttributeError):  # not glibc
        pass


def trim_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing):
    called once a host's read is done, as the many smaller arrays it freed (below
    :data:`RELEASE_FROM_BYTES`) stay in the heap, resident, while the table is built (the 4-chip TPU
    trace: about 30 MiB, in a few milliseconds)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _in_order(start_ns: np.ndarray, duration_ns: np.ndarray) -> bool:
    """Whether a line's events are by start, the longer first at one start (a device line usually
    is): with one boolean per event where the starts all differ, not a float array of the steps."""
    if bool(np.all(start_ns[1:] > start_ns[:-1])):
        return True
    step = np.diff(start_ns)
    return bool(((step > 0) | ((step == 0) & (duration_ns[1:] <= duration_ns[:-1]))).all())


def _constant(n: int, code: int) -> np.ndarray:
    """A line's host or device code for each of its ``n`` events, as :func:`_codes` types it."""
    return np.full(n, code, np.int16 if code < np.iinfo(np.int16).max else np.int32)


def narrowest(values: np.ndarray, floor: type[np.signedinteger[Any]] = np.int8) -> np.ndarray:
    """A line's integers in the narrowest type, from ``floor`` up, that holds them: occurrences are 1
    but for an aggregated event, a device's module runs number thousands, its codes fit int16 (their
    floor: they are joined at :meth:`OpColumns.finish`), its metadata ids int32 (the caller's floor
    where the values are computed on: ``unique_inverse`` shifts them)."""
    widths = [d for d in (np.int8, np.int16, np.int32) if np.iinfo(d).bits >= np.iinfo(floor).bits]
    if not values.size:
        return values.astype(widths[0] if widths else np.int64)
    lo, hi = int(values.min()), int(values.max())
    for dtype in widths:
        if np.iinfo(dtype).min <= lo and hi <= np.iinfo(dtype).max:
            return values.astype(dtype, copy=False)
    return values.astype(np.int64, copy=False)


def _code_dtype(categories: int) -> type[np.signedinteger[Any]]:
    """The codes' type of a Categorical of that many categories (as pandas narrows them)."""
    for dtype in (np.int8, np.int16, np.int32):
        if categories < np.iinfo(dtype).max:
            return dtype
    return np.int64


@dataclass(slots=True)
class OpColumns:
    """The op-event columns of a trace while it is read (becomes :class:`OpEvents`)."""

    hosts: Vocabulary = field(default_factory=Vocabulary)
    devices: Vocabulary = field(default_factory=Vocabulary)
    modules: Vocabulary = field(default_factory=Vocabulary)
    program_ids: Vocabulary = field(default_factory=Vocabulary)
    ops: Vocabulary = field(default_factory=Vocabulary)
    chunks: list[list[np.ndarray]] = field(default_factory=lambda: [[] for _ in range(_WIDTH)])
    """One list of arrays per column (host, device, module, program id, op, start, duration, self,
    run id, occurrences), one array per line."""
    count: int = 0

    def __len__(self) -> int:
        return self.count

    def add(self, host: str, device: str, module: np.ndarray, program_id: np.ndarray, op: np.ndarray,
            start_ns: np.ndarray, duration_ns: np.ndarray, run_id: np.ndarray,
            occurrences: np.ndarray) -> None:
        """Add the op events of one line: codes (from this object's vocabularies) and times."""
        n = len(start_ns)
        if not n:
            return
        if _in_order(start_ns, duration_ns):
            # Already in the order below (a device line usually is): a sort and ten gathers spared.
            def gather(a: np.ndarray) -> np.ndarray:
                return a
        else:
            order = np.lexsort((-duration_ns, start_ns))

            def gather(a: np.ndarray) -> np.ndarray:
                return a[order]
        # (Arrays already of their column's type are kept as they are, not copied: the caller's are fresh.)
        start_ns = gather(start_ns).astype(np.float64, copy=False)
        duration_ns = gather(duration_ns).astype(np.float64, copy=False)
        self_ns = self_times(start_ns, duration_ns)
        parts: tuple[np.ndarray | None, ...] = (
            _constant(n, self.hosts.code(host)), _constant(n, self.devices.code(device)),
            narrowest(gather(module), np.int16), narrowest(gather(program_id), np.int16),
            narrowest(gather(op), np.int16), start_ns, duration_ns,
            None if self_ns is duration_ns else self_ns,  # None: nothing nested, the durations themselves
            narrowest(gather(run_id)), narrowest(gather(occurrences)))
        for column, part in zip(self.chunks, parts, strict=True):
            column.append(part)  # type: ignore[arg-type]
        self.count += n

    def finish(self) -> OpEvents:
        """The columns as :class:`OpEvents`, in the order the lines were added."""
        vocabularies = (self.hosts, self.devices, self.modules, self.program_ids, self.ops)
        # Codes as narrow as a Categorical keeps them (pandas' own choice for that many categories).
        # Execution ids and occurrences in the widest of their lines' types (int8 where all are 1).
        widest = [np.result_type(np.int8, *(part.dtype for part in self.chunks[i])) for i in (8, 9)]
        dtypes = tuple(_code_dtype(len(v.values)) for v in vocabularies) + (np.float64,) * 3 + tuple(widest)
        durations = self.chunks[6]
        selfs = self.chunks[7]
        if all(part is None for part in selfs):
            selfs.clear()  # nothing nested anywhere: the self times are the durations (one array)
        else:
            selfs[:] = [d if part is None else part for d, part in zip(durations, selfs, strict=True)]
        cols: list[np.ndarray] = []
        for i, (column, dtype) in enumerate(zip(self.chunks, dtypes, strict=True)):
            # Column by column, each freed once joined: the peak is the columns plus one.
            if i == 7 and not column and self.count:
                cols.append(cols[6])
                continue
            if len(column) == 1 and column[0].dtype == dtype and column[0].flags.writeable:
                cols.append(column[0])
            else:
                cols.append(np.concatenate(column, dtype=dtype, casting="same_kind") if column
                            else np.zeros(0, dtype))
            column.clear()
        return OpEvents(
            host=self.hosts.coded(cols[0]), device=self.devices.coded(cols[1]),
            module=self.modules.coded(cols[2]), program_id=self.program_ids.coded(cols[3]),
            op=self.ops.coded(cols[4]), start_ns=cols[5], duration_ns=cols[6], self_ns=cols[7],
            run_id=cols[8], occurrences=cols[9],
        )
