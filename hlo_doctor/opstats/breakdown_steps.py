"""The step slices of a breakdown (one per device and step), held as columns.

A long capture has a slice per device and step: hundreds of thousands on a pod. As Python objects
(two dicts each) they cost ~1 KiB apiece in the process that merges the hosts; as columns, one
:class:`SliceColumns` block per device, about 100 bytes. :class:`StepTable` is the sequence of
:class:`StepSlice` the rest of the package reads, made from the blocks; a slice object exists only
while someone looks at it, and the summaries, exports and Parquet columns come from the arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

HOST_KINDS: tuple[str, ...] = ("python", "dispatch", "compile", "wait", "untraced")
"""What the host's driver thread can be doing (see :mod:`hlo_doctor.opstats.host_time`)."""

SCALARS: tuple[str, ...] = ("step", "start_us", "wall_us", "busy_us", "op_us")
"""The one-number columns of a slice, in the order a slice's fields have them."""


@dataclass(frozen=True, slots=True)
class StepSlice:
    """One step on one device. Times in microseconds."""

    host: str
    device: str
    step: int
    start_us: float
    wall_us: float
    busy_us: float
    """Union of the device's op intervals inside the step."""
    op_us: float
    """Sum of the durations of the ops that start in the step (overlapping ops counted each time)."""
    host_us: Mapping[str, float] = field(default_factory=dict)
    """Host driver-thread time in the step by kind (:data:`HOST_KINDS`); sums to ``wall_us``."""
    idle_by_kind: Mapping[str, float] = field(default_factory=dict)
    """The device's idle time in the step split by what the host did meanwhile; sums to ``idle_us``."""

    @property
    def idle_us(self) -> float:
        """Wall time in the step in which the device ran no op."""
        return max(self.wall_us - self.busy_us, 0.0)


@dataclass(frozen=True, slots=True)
class SliceColumns:
    """The step slices of one device as columns (host time and idle time: one column per kind of
    :data:`HOST_KINDS`): compact to hold and to hand from a worker to the merge."""

    host: str
    device: str
    step: np.ndarray
    start_us: np.ndarray
    wall_us: np.ndarray
    busy_us: np.ndarray
    op_us: np.ndarray
    host_us: np.ndarray
    """(steps, kinds)."""
    idle_by_kind: np.ndarray
    """(steps, kinds)."""

    def __len__(self) -> int:
        return len(self.step)

    def slices(self) -> list[StepSlice]:
        """The slices as :class:`StepSlice` objects."""
        return list(_slices(self, 0, len(self)))


def _slices(c: SliceColumns, lo: int, hi: int) -> Iterator[StepSlice]:
    """Slices ``lo:hi`` of a block, made as they are asked for."""
    numbers, starts, walls = c.step[lo:hi].tolist(), c.start_us[lo:hi].tolist(), c.wall_us[lo:hi].tolist()
    busies, ops = c.busy_us[lo:hi].tolist(), c.op_us[lo:hi].tolist()
    host_rows, idle_rows = c.host_us[lo:hi].tolist(), c.idle_by_kind[lo:hi].tolist()
    for i in range(hi - lo):
        yield StepSlice(c.host, c.device, numbers[i], starts[i], walls[i], busies[i], ops[i],
                        dict(zip(HOST_KINDS, host_rows[i], strict=True)),
                        dict(zip(HOST_KINDS, idle_rows[i], strict=True)))


def _kinds(rows: Sequence[Mapping[str, float]]) -> np.ndarray:
    out = np.zeros((len(rows), len(HOST_KINDS)))
    for j, k in enumerate(HOST_KINDS):
        out[:, j] = [float(r.get(k, 0.0)) for r in rows]
    return out


def columns_of(host: str, device: str, rows: Sequence[Any]) -> SliceColumns:
    """One device's block from slices (:class:`StepSlice` objects, or the dicts of an export)."""
    def get(name: str) -> list[Any]:
        return [r[name] if isinstance(r, Mapping) else getattr(r, name) for r in rows]

    start, wall, busy, op = (np.asarray(get(name), np.float64) for name in SCALARS[1:])
    return SliceColumns(host, device, np.asarray(get("step"), np.int64), start, wall, busy, op,
                        _kinds(get("host_us")), _kinds(get("idle_by_kind")))


class StepTable(Sequence[StepSlice]):
    """A breakdown's step slices, device after device: a sequence of :class:`StepSlice` held as
    :class:`SliceColumns` blocks (see the module's docstring)."""

    __slots__ = ("_offsets", "blocks")
    __hash__ = None  # type: ignore[assignment]  # equal by value, and mutable arrays inside

    def __init__(self, blocks: Iterable[SliceColumns] = ()) -> None:
        self.blocks: tuple[SliceColumns, ...] = tuple(b for b in blocks if len(b))
        self._offsets = np.cumsum([0, *(len(b) for b in self.blocks)])

    @classmethod
    def of(cls, slices: Iterable[Any]) -> StepTable:
        """A table from slices (:class:`StepSlice` objects or an export's dicts), a block per run of
        one device."""
        blocks: list[SliceColumns] = []
        run: list[Any] = []
        key = ("", "")
        for s in slices:
            k = (str(s["host"]), str(s["device"])) if isinstance(s, Mapping) else (s.host, s.device)
            if k != key and run:
                blocks.append(columns_of(*key, run))
                run = []
            key = k
            run.append(s)
        if run:
            blocks.append(columns_of(*key, run))
        return cls(blocks)

    def __len__(self) -> int:
        return int(self._offsets[-1])

    @overload
    def __getitem__(self, i: int) -> StepSlice: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[StepSlice, ...]: ...

    def __getitem__(self, i: int | slice) -> StepSlice | tuple[StepSlice, ...]:
        if isinstance(i, slice):
            return tuple(self[k] for k in range(*i.indices(len(self))))
        n = len(self)
        if not -n <= i < n:
            raise IndexError("step slice index out of range")
        i %= n
        b = int(np.searchsorted(self._offsets, i, side="right")) - 1
        k = i - int(self._offsets[b])
        return next(_slices(self.blocks[b], k, k + 1))

    def __iter__(self) -> Iterator[StepSlice]:
        for block in self.blocks:
            # A few thousand at a time: a walk over every slice holds a chunk of objects, not all.
            for lo in range(0, len(block), 4096):
                yield from _slices(block, lo, min(lo + 4096, len(block)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepTable):
            mine, theirs = self._flat(), other._flat()
            return mine[0] == theirs[0] and all(np.array_equal(a, b) for a, b in zip(mine[1], theirs[1], strict=True))
        if isinstance(other, Sequence):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __repr__(self) -> str:
        return f"StepTable({len(self)} slices on {len(self.devices())} devices)"

    def _flat(self) -> tuple[list[tuple[str, str, int]], list[np.ndarray]]:
        """(host, device, slices) runs, adjacent runs of one device joined; and every column."""
        runs: list[tuple[str, str, int]] = []
        for b in self.blocks:
            if runs and runs[-1][:2] == (b.host, b.device):
                runs[-1] = (b.host, b.device, runs[-1][2] + len(b))
            else:
                runs.append((b.host, b.device, len(b)))
        return runs, [self.column(name) for name in (*SCALARS, "host_us", "idle_by_kind")]

    # -- columns -------------------------------------------------------------------------------------

    def column(self, name: str) -> np.ndarray:
        """One column over every slice: a name of :data:`SCALARS`, ``idle_us``, or ``host_us`` /
        ``idle_by_kind`` (one column per kind of :data:`HOST_KINDS`)."""
        if name == "idle_us":
            return np.maximum(self.column("wall_us") - self.column("busy_us"), 0.0)
        if not self.blocks:
            width = (0, len(HOST_KINDS)) if name in ("host_us", "idle_by_kind") else (0,)
            return np.zeros(width, np.int64 if name == "step" else np.float64)
        return np.concatenate([getattr(b, name) for b in self.blocks])

    def devices(self) -> list[tuple[str, str]]:
        """(host, device) of the blocks, each once, in their order."""
        return list(dict.fromkeys((b.host, b.device) for b in self.blocks))

    def hosts_devices(self) -> tuple[np.ndarray, np.ndarray]:
        """The host and the device of every slice (object arrays)."""
        counts = [len(b) for b in self.blocks]
        return (np.repeat(np.asarray([b.host for b in self.blocks], object), counts),
                np.repeat(np.asarray([b.device for b in self.blocks], object), counts))

    def records(self) -> list[dict[str, Any]]:
        """Every slice as the dict an export holds (its fields, then ``idle_us``)."""
        out: list[dict[str, Any]] = []
        for b in self.blocks:
            cols = [b.step.tolist(), *(getattr(b, n).tolist() for n in SCALARS[1:])]
            host_rows, idle_rows = b.host_us.tolist(), b.idle_by_kind.tolist()
            idle = np.maximum(b.wall_us - b.busy_us, 0.0).tolist()
            for i in range(len(b)):
                out.append({"host": b.host, "device": b.device, **{n: c[i] for n, c in zip(SCALARS, cols, strict=True)},
                            "host_us": dict(zip(HOST_KINDS, host_rows[i], strict=True)),
                            "idle_by_kind": dict(zip(HOST_KINDS, idle_rows[i], strict=True)), "idle_us": idle[i]})
        return out


class SliceSums:
    """What a breakdown's summary reads of its slices (:class:`~hlo_doctor.opstats.breakdown.StepBreakdown`:
    the means over every device and step, each kind's, each device's), summed block after block in
    the table's order, the blocks not kept: a pod's merging process holds these few numbers, not a
    slice per device and step of every host (120 bytes each: 2.5 MiB a host of 4 devices and 5,537
    steps). Each sum is a running ``cumsum``, the same float additions in the same order as summing
    the whole column first to last, so the figures are the table's to the bit."""

    __slots__ = ("count", "devices", "first_device", "totals")

    def __init__(self) -> None:
        self.count = 0
        self.totals: dict[str, np.ndarray | None] = dict.fromkeys(
            ("wall_us", "busy_us", "idle_us", "host_us", "idle_by_kind"))
        self.devices: dict[tuple[str, str], list[Any]] = {}
        """(host, device) -> [slices, wall, busy, idle] summed so far."""
        self.first_device: dict[str, tuple[str, list[np.ndarray], list[np.ndarray]]] = {}
        """host -> (the first of its devices by name, its slices' starts and walls block by block): the
        step spans a rule reads of a host (:meth:`~hlo_doctor.opstats.breakdown.StepBreakdown.host_step_spans_us`),
        16 bytes a step of one device."""

    def add(self, b: SliceColumns) -> None:
        """Sum the next block (of the table's order; a block without slices is none of the table's)."""
        if not len(b):
            return
        idle = np.maximum(b.wall_us - b.busy_us, 0.0)
        for name, col in (("wall_us", b.wall_us), ("busy_us", b.busy_us), ("idle_us", idle),
                          ("host_us", b.host_us), ("idle_by_kind", b.idle_by_kind)):
            self.totals[name] = _running(self.totals[name], col)
        first = self.first_device.get(b.host)
        if first is None or b.device < first[0]:
            self.first_device[b.host] = (b.device, [b.start_us], [b.wall_us])
        elif b.device == first[0]:
            first[1].append(b.start_us)
            first[2].append(b.wall_us)
        d = self.devices.setdefault((b.host, b.device), [0, None, None, None])
        d[0] += len(b)
        for k, col in ((1, b.wall_us), (2, b.busy_us), (3, idle)):
            d[k] = _running(d[k], col)
        self.count += len(b)

    def host_step_spans_us(self, host: str) -> tuple[np.ndarray, np.ndarray]:
        """The starts and walls (us) of the slices of ``host``'s first device by name, in the table's order."""
        first = self.first_device.get(host)
        if first is None:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(first[1]), np.concatenate(first[2])

    def total(self, name: str) -> float:
        """The sum of a one-number column (``wall_us``, ``busy_us``, ``idle_us``) over every slice."""
        acc = self.totals[name]
        return float(acc) if acc is not None else 0.0

    def by_kind(self, name: str) -> list[float]:
        """The sums of ``host_us`` or ``idle_by_kind``, one per kind of :data:`HOST_KINDS`."""
        acc = self.totals[name]
        return [float(x) for x in acc] if acc is not None else [0.0] * len(HOST_KINDS)


def _running(acc: np.ndarray | None, col: np.ndarray) -> np.ndarray | None:
    """``acc`` (the sum so far, None before any value) plus ``col``'s values one after another
    (rows, for a column per kind)."""
    if not len(col):
        return acc
    if acc is None:
        return np.cumsum(col, axis=0)[-1]
    return np.cumsum(np.concatenate([np.asarray(acc)[None], col]), axis=0)[-1]
