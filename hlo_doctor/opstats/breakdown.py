"""The step breakdown: per device and step, where the step's wall time goes.

For each device and step (the table's steps, :mod:`~hlo_doctor.opstats.step_spans`):

- **busy**: the union of the device's op intervals in the step (overlapping ops count once: GPU
  streams, XLA:CPU's thread pool); on XLA:CPU the "device" is the host's XLA:CPU threads, so busy is
  the union of the op intervals on those threads;
- **idle** = wall - busy: time in the step in which no op runs;
- on the host, what its driver thread did during the step (:mod:`~hlo_doctor.opstats.host_time`):
  Python, dispatch (``PjitFunction``), compile, waiting (``block_until_ready``), untraced; and the
  same split of the device's **idle** time: what the host was doing while the device waited;
- **lines**: the source lines (first frame outside the frameworks) that filled the idle time, with
  the idle time each explains per step.

The host columns and lines are the **driver** thread's: per host, the thread that dispatches the
most programs. Every other thread that dispatches programs (a server thread beside a detokenizer,
two engines in one process) is a :class:`HostThread` of its own, with its host time, the device
idle time it spans and its lines, apart: two threads run at once, so their times are not added to
the step's. Python threads that dispatch nothing are left out.

A **window** per device is xprof's view: from the device's first op (or ``Steps`` event) to its last,
busy over span; its idle share is what xprof's overview page reports as device idle time.
Built by :func:`hlo_doctor.opstats.breakdown_build.breakdown_part` (one host's devices) and
:func:`~hlo_doctor.opstats.breakdown_build.finish_breakdown` (the hosts' parts put together).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from hlo_doctor.opstats.breakdown_steps import HOST_KINDS, SliceSums, StepSlice, StepTable

__all__ = ["BREAKDOWN_SCHEMA", "HOST_KINDS", "DeviceWindow", "HostLine", "HostThread", "StepBreakdown", "StepSlice",
           "StepTable", "breakdown_from_dict"]

BREAKDOWN_SCHEMA = "hlo-doctor.breakdown/1"


@dataclass(frozen=True, slots=True)
class HostLine:
    """One place on the host that filled device idle time, per device step (means over the slices)."""

    kind: str
    """``python``, ``dispatch``, ``compile``, ``wait`` or ``untraced``."""
    where: str
    """``runner.py:135 _sample_from_logits`` (the tracer's base name and the function's first line):
    the first frame outside the frameworks; "" when every open frame was a framework's."""
    target: str
    """The program dispatched or compiled (``jit_sample``), or the framework call made from ``where``
    (``array_methods.py:116 _astype``); "" for time in ``where`` itself."""
    path: str
    """The full path of ``where``'s file when the trace's HLO metadata names it, else its base name."""
    idle_us: float
    """Device idle time per step it explains (host in it while the device ran nothing)."""
    host_us: float
    """Host time per step in it."""

    @property
    def source(self) -> str:
        """``path:line`` of ``where``, or ""."""
        head = self.where.split(" ", 1)[0]
        file, sep, line = head.rpartition(":")
        return f"{self.path or file}:{line}" if sep and line.isdigit() else ""


@dataclass(frozen=True, slots=True)
class HostThread:
    """One host thread that dispatches programs: what it did per device step of its host (means)."""

    host: str
    thread: str
    """The line's name and id (``python 8056110614980132888``: every Python thread is ``python``)."""
    entry: str
    """Its outermost frame outside the frameworks (``server.py:18 serve``), or ""."""
    driver: bool
    """The host's driver thread (the most dispatches): the step rows' host columns and the
    breakdown's lines are its."""
    dispatches: int
    frames: int
    host_by_kind_us: dict[str, float]
    """Its time per device step by kind (:data:`HOST_KINDS`)."""
    idle_by_kind_us: dict[str, float]
    """Device idle time per device step while it was in each kind."""
    lines: tuple[HostLine, ...] = ()
    """Its lines, most idle time first; empty for the driver thread (its lines are the breakdown's)."""


@dataclass(frozen=True, slots=True)
class DeviceWindow:
    """One device from its first op to its last (xprof's device idle time): times in microseconds."""

    host: str
    device: str
    start_us: float
    span_us: float
    busy_us: float
    op_us: float

    @property
    def idle_pct(self) -> float:
        """Idle share of the span, in %."""
        return 100.0 * (1.0 - self.busy_us / self.span_us) if self.span_us > 0 else 0.0


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """The step breakdown of one capture (see the module's docstring)."""

    step_source: str
    busy_definition: str
    steps: Sequence[StepSlice]
    """One slice per device and step: a :class:`StepTable` (columns; any other sequence of
    :class:`StepSlice` given here is made one, see :attr:`table`)."""
    lines: tuple[HostLine, ...] = ()
    """Most idle time first."""
    windows: tuple[DeviceWindow, ...] = ()
    python_frames: bool = False
    """The capture holds the Python tracer's frames (``$file.py:12 function`` events)."""
    dispatch_spans: bool = False
    """The capture holds jax's ``PjitFunction(<name>)`` dispatch spans."""
    driver_threads: tuple[tuple[str, str], ...] = ()
    """(host, thread) whose events say what the host did."""
    notes: tuple[str, ...] = ()
    threads: tuple[HostThread, ...] = ()
    """Every thread that dispatches programs, per host, the driver first."""
    sums: SliceSums | None = None
    """The slices' sums alone, where the slices were not kept (:attr:`steps` then empty): the
    summary figures come from them, and :meth:`to_dict` has no slices to give."""

    def __post_init__(self) -> None:
        if not isinstance(self.steps, StepTable):
            object.__setattr__(self, "steps", StepTable.of(self.steps))

    @property
    def table(self) -> StepTable:
        """:attr:`steps` as the columns they are."""
        assert isinstance(self.steps, StepTable)
        return self.steps

    def host_step_spans_us(self, host: str) -> tuple[np.ndarray, np.ndarray]:
        """The starts and walls (us) of the steps of ``host``'s first device (by name), in the table's
        order, kept or summed (:class:`SliceSums` keeps those of each host)."""
        if self.sums is not None:
            return self.sums.host_step_spans_us(host)
        blocks = [c for c in self.table.blocks if c.host == host]
        if not blocks:
            return np.zeros(0), np.zeros(0)
        first = min(c.device for c in blocks)
        mine = [c for c in blocks if c.device == first]
        return np.concatenate([c.start_us for c in mine]), np.concatenate([c.wall_us for c in mine])

    # -- summary figures (over every device and step) ----------------------------------------------

    def _total(self, name: str) -> float:
        return self.sums.total(name) if self.sums is not None else _sum(self.table.column(name))

    @property
    def slice_count(self) -> int:
        """Slices (device steps) the breakdown covers, kept or summed."""
        return self.sums.count if self.sums is not None else len(self.steps)

    @property
    def wall_us(self) -> float:
        """Mean step wall time on one device."""
        return self._total("wall_us") / self.slice_count if self.slice_count else 0.0

    @property
    def busy_us(self) -> float:
        """Mean device busy time per step."""
        return self._total("busy_us") / self.slice_count if self.slice_count else 0.0

    @property
    def idle_us(self) -> float:
        """Mean device idle time per step."""
        return self._total("idle_us") / self.slice_count if self.slice_count else 0.0

    @property
    def idle_pct(self) -> float:
        """Device idle time over step wall time, every device and step, in %."""
        wall = self._total("wall_us")
        return 100.0 * self._total("idle_us") / wall if wall > 0 else 0.0

    def _by_kind(self, name: str) -> dict[str, float]:
        n = max(self.slice_count, 1)
        if self.sums is not None:
            return {k: v / n for k, v in zip(HOST_KINDS, self.sums.by_kind(name), strict=True)}
        sums = self.table.column(name)
        return {k: _sum(sums[:, j]) / n for j, k in enumerate(HOST_KINDS)}

    def idle_by_kind(self) -> dict[str, float]:
        """Mean device idle time per step by what the host did meanwhile."""
        return self._by_kind("idle_by_kind")

    def host_by_kind(self) -> dict[str, float]:
        """Mean host driver-thread time per step by kind."""
        return self._by_kind("host_us")

    def window_idle_pct(self) -> float:
        """Device idle over the devices' spans (first op to last), in %: xprof's device idle time."""
        span = sum(w.span_us for w in self.windows)
        return 100.0 * (1.0 - sum(w.busy_us for w in self.windows) / span) if span > 0 else 0.0

    def per_device(self) -> list[dict[str, Any]]:
        """One summary per device: steps, mean wall, busy and idle per step, idle %."""
        if self.sums is not None:
            return [_device_row(host, device, n, float(wall), float(busy), float(idle))
                    for (host, device), (n, wall, busy, idle) in sorted(self.sums.devices.items())]
        blocks: dict[tuple[str, str], list[Any]] = {}
        for b in self.table.blocks:
            blocks.setdefault((b.host, b.device), []).append(b)
        rows = []
        for (host, device), bs in sorted(blocks.items()):
            walls = np.concatenate([b.wall_us for b in bs])
            busies = np.concatenate([b.busy_us for b in bs])
            rows.append(_device_row(host, device, len(walls), _sum(walls), _sum(busies),
                                    _sum(np.maximum(walls - busies, 0.0))))
        return rows

    # -- JSON ----------------------------------------------------------------------------------------

    def to_dict(self, *, steps: bool = True) -> dict[str, Any]:
        """A JSON-ready dict (times in microseconds); :func:`breakdown_from_dict` reads it back.
        ``steps=False`` leaves out the slice of each device and step (the summary stays).

        Raises:
            ValueError: ``steps`` asked of a breakdown that holds its slices' sums alone.
        """
        if steps and self.sums is not None:
            raise ValueError("this breakdown holds its slices' sums, not the slices: read the hosts with them")
        out = {
            "schema": BREAKDOWN_SCHEMA,
            "step_source": self.step_source,
            "busy_definition": self.busy_definition,
            "idle_definition": "idle = step wall time - busy; idle_by_kind splits it by what the host's "
                               "driver thread did meanwhile",
            "python_frames": self.python_frames,
            "dispatch_spans": self.dispatch_spans,
            "driver_threads": [list(t) for t in self.driver_threads],
            "summary": {"wall_us": self.wall_us, "busy_us": self.busy_us, "idle_us": self.idle_us,
                        "idle_pct": self.idle_pct, "idle_by_kind_us": self.idle_by_kind(),
                        "host_by_kind_us": self.host_by_kind(), "window_idle_pct": self.window_idle_pct(),
                        "devices": self.per_device()},
            "steps": self.table.records() if steps else None,
            "lines": [{**asdict(line), "source": line.source} for line in self.lines],
            "windows": [{**asdict(w), "idle_pct": w.idle_pct} for w in self.windows],
            "notes": list(self.notes),
            "threads": [{**asdict(t), "lines": [{**asdict(x), "source": x.source} for x in t.lines]}
                        for t in self.threads],
        }
        if not steps:
            del out["steps"]
        return out


def _device_row(host: str, device: str, n: int, wall: float, busy: float, idle: float) -> dict[str, Any]:
    """One device's summary from its slices' count and sums."""
    return {"host": host, "device": device, "steps": n, "wall_us": wall / n, "busy_us": busy / n,
            "idle_us": idle / n, "idle_pct": 100.0 * idle / wall if wall > 0 else 0.0}


def _sum(values: np.ndarray) -> float:
    """The sum added in order, first to last (as Python's ``sum``: the same figures as slice objects
    added one by one gave)."""
    return float(np.cumsum(values)[-1]) if len(values) else 0.0


def _take(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def breakdown_from_dict(d: Mapping[str, Any]) -> StepBreakdown:
    """Read a :class:`StepBreakdown` back from :meth:`StepBreakdown.to_dict` (unknown keys ignored).

    Raises ``KeyError``/``TypeError``/``ValueError`` on a malformed dict (the caller names the file).
    """
    steps = StepTable.of(d.get("steps", []))
    return StepBreakdown(
        step_source=str(d.get("step_source", "")), busy_definition=str(d.get("busy_definition", "")),
        steps=steps, lines=tuple(HostLine(**_take(HostLine, x)) for x in d.get("lines", [])),
        windows=tuple(DeviceWindow(**_take(DeviceWindow, w)) for w in d.get("windows", [])),
        python_frames=bool(d.get("python_frames", False)), dispatch_spans=bool(d.get("dispatch_spans", False)),
        driver_threads=tuple((str(h), str(t)) for h, t in d.get("driver_threads", [])),
        notes=tuple(str(n) for n in d.get("notes", [])),
        threads=tuple(HostThread(**{**_take(HostThread, t),
                                    "lines": tuple(HostLine(**_take(HostLine, x)) for x in t.get("lines", []))})
                      for t in d.get("threads", [])),
    )
