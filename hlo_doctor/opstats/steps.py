"""Steps of a capture: from step annotations, or from the executions of the main module."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hlo_doctor.trace import Trace


def steps_from_annotations(trace: Trace, ev: pd.DataFrame) -> tuple[np.ndarray, list[float], int]:
    """Step index (step_num) per event, or -1 outside every step; step wall times; step count."""
    step_of = np.full(len(ev), -1, dtype=np.int64)
    times: list[float] = []
    counts: dict[str, int] = {}
    # Only the most common annotation name counts as "the step" (a program may nest other marks).
    names: dict[str, int] = {}
    for s in trace.steps:
        names[s.name] = names.get(s.name, 0) + 1
    step_name = max(names, key=lambda n: names[n])
    hosts = ev["host"].astype(str).to_numpy()
    starts = ev["start_ns"].to_numpy()
    for host in sorted({s.host for s in trace.steps}):
        marks = sorted((s for s in trace.steps if s.host == host and s.name == step_name),
                       key=lambda s: s.start_ns)
        counts[host] = len(marks)
        on_host = hosts == host
        for position, mark in enumerate(marks):
            times.append(mark.duration_ns / 1e3)
            label = mark.step_num if mark.step_num >= 0 else position
            inside = on_host & (starts >= mark.start_ns) & (starts <= mark.start_ns + mark.duration_ns)
            step_of[inside] = label
    return step_of, times, max(counts.values()) if counts else 0


def steps_from_executions(ev: pd.DataFrame) -> tuple[np.ndarray, list[float], int, str]:
    """Steps from the executions of the main module (the one with the most op time)."""
    totals = ev.groupby(["module", "program_id"], observed=True)["duration_ns"].sum()
    main_module, main_pid = totals.idxmax()
    step_of = np.full(len(ev), -1, dtype=np.int64)
    times: list[float] = []
    counts: list[int] = []
    hosts = ev["host"].astype(str).to_numpy()
    starts = ev["start_ns"].to_numpy()
    ends = starts + ev["duration_ns"].to_numpy()
    for host in sorted(set(hosts)):
        on_host = hosts == host
        main = ev[on_host & (ev["module"].astype(str).to_numpy() == str(main_module))
                  & (ev["program_id"].to_numpy() == main_pid)]
        if main["run_id"].ge(0).all():
            exec_starts = np.sort(main.groupby("run_id")["start_ns"].min().to_numpy())
        else:
            # No execution ids: each event of the main module's most frequent op marks one run
            # (ties: the op that starts first, i.e. the head of the program).
            per_op = main.groupby(main["op"].astype(str))["start_ns"].agg(["size", "min"])
            first_op = per_op.sort_values(["size", "min"], ascending=[False, True]).index[0]
            exec_starts = np.sort(main[main["op"].astype(str) == first_op]["start_ns"].to_numpy())
        if len(exec_starts) == 0:
            continue
        last_end = float(ends[on_host].max())
        bounds = np.append(exec_starts, max(last_end, float(exec_starts[-1])))
        counts.append(len(exec_starts))
        times.extend(float(d) / 1e3 for d in np.diff(bounds))
        idx = np.searchsorted(exec_starts, starts, side="right") - 1
        step_of[on_host & (idx >= 0)] = idx[on_host & (idx >= 0)]
    return step_of, times, max(counts) if counts else 0, f"{main_module}({main_pid})"
