"""Where each step starts and ends on each device: the intervals behind the step breakdown.

The same steps as the op-stats table (:func:`hlo_doctor.opstats.build.build_opstats` picks the
source; :mod:`hlo_doctor.opstats.steps` labels the events): host step annotations of the most
common name (every device of that host shares them), the device ``Steps`` lines, or one execution
of the main module per step, start to next start, on each device; else the whole trace.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hlo_doctor.trace import Trace

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


def devices_of(ev: pd.DataFrame) -> list[Device]:
    """The devices the op events ran on, sorted."""
    pairs = ev[["host", "device"]].astype(str).drop_duplicates()
    return sorted(zip(pairs["host"], pairs["device"], strict=True))


def step_spans(trace: Trace, ev: pd.DataFrame, source: str) -> dict[Device, StepSpans]:
    """Each device's steps, from ``source`` (the table's ``step_source``)."""
    devices = devices_of(ev)
    out: dict[Device, StepSpans] = {}
    if source == "annotation" and trace.steps:
        name = Counter(s.name for s in trace.steps).most_common(1)[0][0]
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
        out = _executions(ev, devices)
    for host, device in devices:
        if (host, device) not in out:
            on = (ev["host"].astype(str) == host) & (ev["device"].astype(str) == device)
            s = ev.loc[on, "start_ns"].to_numpy()
            e = s + ev.loc[on, "duration_ns"].to_numpy()
            out[(host, device)] = _spans([float(s.min())], [float(e.max())], [0])
    return out


def _executions(ev: pd.DataFrame, devices: list[Device]) -> dict[Device, StepSpans]:
    """One step per execution of the main module (the most op time) on each device, start to next
    start; the last ends with the device's last op (as :func:`~hlo_doctor.opstats.steps.steps_from_executions`)."""
    totals = ev.groupby(["module", "program_id"], observed=True)["duration_ns"].sum()
    main_module, main_pid = totals.idxmax()
    is_main = (ev["module"].astype(str).to_numpy() == str(main_module)) & (ev["program_id"].to_numpy() == main_pid)
    hosts = ev["host"].astype(str).to_numpy()
    dev = ev["device"].astype(str).to_numpy()
    starts = ev["start_ns"].to_numpy()
    ends = starts + ev["duration_ns"].to_numpy()
    out: dict[Device, StepSpans] = {}
    for host, device in devices:
        on = (hosts == host) & (dev == device)
        main = ev[on & is_main]
        if not len(main):
            continue
        if main["run_id"].ge(0).all():
            exec_starts = np.sort(main.groupby("run_id")["start_ns"].min().to_numpy())
        else:
            per_op = main.groupby(main["op"].astype(str))["start_ns"].agg(["size", "min"])
            first_op = per_op.sort_values(["size", "min"], ascending=[False, True]).index[0]
            exec_starts = np.sort(main[main["op"].astype(str) == first_op]["start_ns"].to_numpy())
        last = max(float(ends[on].max()), float(exec_starts[-1]))
        bounds = np.append(exec_starts, last)
        out[(host, device)] = StepSpans(bounds[:-1].astype(np.float64), bounds[1:].astype(np.float64),
                                        np.arange(len(exec_starts), dtype=np.int64))
    return out
