"""Where each step starts and ends on each device: the intervals behind the step breakdown.

The same steps as the op-stats table (:func:`hlo_doctor.opstats.build.build_opstats` picks the
source; :mod:`hlo_doctor.opstats.steps` labels the events): host step annotations of the most
common name (every device of that host shares them), the device ``Steps`` lines, or one execution
of the main module per step, start to next start, on each device; else the whole trace.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from hlo_doctor.core.lazy import pd
from hlo_doctor.opstats.steps import execution_starts
from hlo_doctor.trace import OpEvents, Trace
from hlo_doctor.trace.columns import counts
from hlo_doctor.trace.cwire import NUMPY_READER_ENV
from hlo_doctor.trace.model import Coded

try:
    import hlo_doctor.opstats._xsums as _xsums  # type: ignore[import-not-found]
except ImportError:  # (built by setup.py where a compiler is: optional)
    _xsums = None

Device = tuple[str, str]
"""(host, device plane): one device as the op events name it (``("vm", "/host:CPU")`` on XLA:CPU)."""


@dataclass(frozen=True, slots=True)
class StepSpans:
    """The steps of one device: starts and ends (ns, sorted) and each step's number."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    step: np.ndarray


def _spans(starts: list[float], ends: list[float], nums: list[int]) -> StepSpans:
    order = np.argsort(np.asarray(starts, np.float64), kind="stable")
    return StepSpans(np.asarray(starts, np.float64)[order], np.asarray(ends, np.float64)[order],
                     np.asarray(nums, np.int64)[order])


def device_index(ops: OpEvents) -> tuple[np.ndarray, list[Device], np.ndarray]:
    """The devices the op events ran on (sorted by code), each event's index into them, and each
    device's events (int64).

    From the codes of ``host`` and ``device``: no string is built per event (a device trace holds
    millions). In one compiled pass where it is built (``_xsums.device_index``; these numpy passes
    judge it), else in place: one int32 array per event at a time.
    """
    host, dev = ops.host, ops.device
    width = len(dev.categories) + 1
    space = (len(host.categories) + 1) * width
    wide = np.int32 if space < np.iinfo(np.int32).max else np.int64
    if not len(ops):
        return np.zeros(0, np.int32), [], np.zeros(0, np.int64)
    if _xsums is not None and not os.environ.get(NUMPY_READER_ENV):
        per_key = np.zeros(space, np.int64)
        which = np.empty(len(ops), wide)
        c = np.ascontiguousarray
        if _xsums.device_index(c(host.codes), c(dev.codes), width, per_key, which):
            present = np.flatnonzero(per_key)
            return which, _devices(host, dev, width, present), per_key[present]
    key: np.ndarray[Any, np.dtype[np.signedinteger[Any]]] = np.array(host.codes, dtype=wide, copy=True)
    key *= width
    key += np.asarray(dev.codes)
    per_key = counts(key)
    present = np.flatnonzero(per_key)
    lookup = np.full(int(present[-1]) + 1, -1, key.dtype)
    lookup[present] = np.arange(len(present))
    for a in range(0, len(key), 1 << 18):  # in place, a chunk at a time: no second array per event
        key[a:a + (1 << 18)] = lookup[key[a:a + (1 << 18)]]
    return key, _devices(host, dev, width, present), per_key[present]


def _devices(host: Coded, dev: Coded, width: int, present: np.ndarray) -> list[Device]:
    return [(str(host.categories[k // width]), str(dev.categories[k % width])) for k in present.tolist()]


def step_spans(trace: Trace, source: str, which: np.ndarray,
               devices: list[Device], *, name: str | None = None,
               main: tuple[str, int] | None = None) -> dict[Device, StepSpans]:
    """Each device's steps, from ``source`` (the table's ``step_source``); ``which`` and ``devices``
    from :func:`device_index`. ``name`` (the annotation that is the step) and ``main`` (the module
    whose executions are) default to this trace's own choice."""
    out: dict[Device, StepSpans] = {}
    if source == "annotation" and trace.steps:
        name = name if name is not None else Counter(s.name for s in trace.steps).most_common(1)[0][0]
        for host, device in devices:
            marks = [s for s in trace.steps if s.host == host and s.name == name]
            if marks:
                out[(host, device)] = _spans([m.start_ns for m in marks], [m.start_ns + m.duration_ns for m in marks],
                                             [m.step_num if m.step_num >= 0 else k for k, m in enumerate(marks)])
    elif source == "device-steps" and trace.device_steps:
        for host, device in devices:
            marks = [s for s in trace.device_steps if s.host == host and s.device == device]
            if marks:
                out[(host, device)] = _spans([m.start_ns for m in marks], [m.start_ns + m.duration_ns for m in marks],
                                             [m.step_num if m.step_num >= 0 else k for k, m in enumerate(marks)])
    elif source == "module-executions":
        out = _executions(trace.ops.frame(), which, devices, main)
    missing = [(i, d) for i, d in enumerate(devices) if d not in out]
    if missing:  # (the ends of millions of events made only where a device has no step)
        starts = trace.ops.start_ns.astype(np.float64, copy=False)
        ends = starts + trace.ops.duration_ns
        for i, d in missing:
            on = which == i
            out[d] = _spans([float(starts[on].min())], [float(ends[on].max())], [0])
    return out


def _executions(ev: pd.DataFrame, which: np.ndarray, devices: list[Device],
                main_key: tuple[str, int] | None = None) -> dict[Device, StepSpans]:
    """One step per execution of the main module (the most op time) on each device, start to next
    start; the last ends with the device's last op (as :func:`~hlo_doctor.opstats.steps.steps_from_executions`)."""
    main_module, main_pid = main_key if main_key is not None else \
        ev.groupby(["module", "program_id"], observed=True)["duration_ns"].sum().idxmax()
    is_main = (ev["module"].to_numpy() == main_module) & (ev["program_id"].to_numpy() == main_pid)
    starts = ev["start_ns"].to_numpy(np.float64)
    ends = starts + ev["duration_ns"].to_numpy(np.float64)
    out: dict[Device, StepSpans] = {}
    for i, d in enumerate(devices):
        on = which == i
        main = ev[on & is_main]
        if not len(main):
            continue
        exec_starts = execution_starts(main)
        last = max(float(ends[on].max()), float(exec_starts[-1]))
        bounds = np.append(exec_starts, last)
        out[d] = StepSpans(bounds[:-1].astype(np.float64), bounds[1:].astype(np.float64),
                           np.arange(len(exec_starts), dtype=np.int64))
    return out
