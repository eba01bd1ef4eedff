"""Steps of a capture: from host step annotations, the device ``Steps`` lines, or the executions of
the main module."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hlo_doctor.core.lazy import pd
from hlo_doctor.trace import OpEvents, StepMark
from hlo_doctor.trace.cwire import enclosing_spans


def steps_from_marks(marks: Sequence[StepMark], ops: OpEvents, *, by_device: bool,
                     name: str | None = None) -> tuple[np.ndarray, list[float], int]:
    """Step index (step_num) per event of ``ops``, or -1 outside every step; step wall times; step
    count (from the events' codes: pandas is not needed).

    ``marks`` are host step annotations (``by_device=False``: an event belongs to the marks of its
    host; only the most common annotation name counts as "the step", as a program may nest other
    marks) or device ``Steps`` events (``by_device=True``: the marks of the event's own device).
    ``name`` fixes the annotation that is the step where other hosts decide it.
    """
    times: list[float] = []
    counts: list[int] = []
    if not by_device:
        names: dict[str, int] = {}
        for s in marks:
            names[s.name] = names.get(s.name, 0) + 1
        step_name = name if name is not None else max(names, key=lambda n: names[n])
        marks = [s for s in marks if s.name == step_name]
    # A step's label is its number, else its place among its group's marks: int32 where all fit.
    narrow = len(marks) < (1 << 31) and all(s.step_num < (1 << 31) for s in marks)
    step_of = np.full(len(ops), -1, dtype=np.int32 if narrow else np.int64)
    host_index = {str(v): i for i, v in enumerate(ops.host.categories)}
    device_index = {str(v): i for i, v in enumerate(ops.device.categories)}
    host_codes = np.asarray(ops.host.codes)
    device_codes = np.asarray(ops.device.codes)
    starts = ops.start_ns
    groups: dict[tuple[str, str], list[StepMark]] = {}
    for s in marks:
        groups.setdefault((s.host, s.device if by_device else ""), []).append(s)
    runs = _runs(host_codes, device_codes if by_device else None) if groups else {}
    for (host, device), group in sorted(groups.items()):
        group.sort(key=lambda s: s.start_ns)
        counts.append(len(group))
        times.extend(s.duration_ns / 1e3 for s in group)
        mark_starts = np.asarray([s.start_ns for s in group])
        mark_ends = mark_starts + np.asarray([s.duration_ns for s in group])
        labels = np.asarray([s.step_num if s.step_num >= 0 else k for k, s in enumerate(group)], np.int64)
        # Only the group's own events are looked up (a device's marks among its events, not all).
        key = host_index.get(host, -2), (device_index.get(device, -2) if by_device else 0)
        one = runs.get(key, [])
        if len(one) <= 1:
            # The group's events are one run (a device's, read a plane at a time), or none: views,
            # not copies, and no index per event (an int64 per event is the largest temporary of the
            # read's end).
            for first, end in one:
                for a in range(first, end, _CHUNK):
                    run = slice(a, min(a + _CHUNK, end))
                    _label(step_of[run], starts[run], mark_starts, mark_ends, labels)
            continue
        on = host_codes == key[0]
        if by_device:
            on &= device_codes == key[1]
        where = np.flatnonzero(on)
        del on
        for a in range(0, len(where), _CHUNK):
            some = where[a:a + _CHUNK]
            mine = step_of[some]
            _label(mine, starts[some], mark_starts, mark_ends, labels)
            step_of[some] = mine
    return step_of, times, max(counts) if counts else 0


def _runs(host_codes: np.ndarray, device_codes: np.ndarray | None) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(host code, device code or 0) -> the [first, end) runs of consecutive events with those codes,
    in order: the codes compared with their neighbours as they are (a byte an event), not a mask of
    the events per group."""
    if not len(host_codes):
        return {}
    change = host_codes[1:] != host_codes[:-1]
    if device_codes is not None:
        change |= device_codes[1:] != device_codes[:-1]
    heads = [0, *(np.flatnonzero(change) + 1).tolist()]
    del change
    hosts = host_codes[heads].tolist()
    devices = device_codes[heads].tolist() if device_codes is not None else [0] * len(heads)
    out: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for h, d, first, end in zip(hosts, devices, heads, [*heads[1:], len(host_codes)], strict=True):
        out.setdefault((h, d), []).append((first, end))
    return out


_CHUNK = 1 << 18
"""Events labelled at a time: the lookups' int64 temporaries of a device's millions of events would
be tens of MiB beside the columns, at the read's peak."""


def _label(out: np.ndarray, mine: np.ndarray, mark_starts: np.ndarray, mark_ends: np.ndarray,
           labels: np.ndarray) -> None:
    """Set ``out`` (the labels of events starting at ``mine``, sorted or not) to the label of the mark
    each event starts in; events in no mark keep theirs."""
    idx = enclosing_spans(mark_starts, mark_ends, mine)
    inside = idx >= 0
    out[inside] = labels[idx[inside]]


def execution_starts(main: pd.DataFrame) -> np.ndarray:
    """Sorted start times of the executions of the main program in ``main`` (one device's events of
    it): the first event of each execution id, or, without ids, each event of its most frequent op
    (ties: the op that starts first, i.e. the head of the program)."""
    if main["run_id"].ge(0).all():
        return np.sort(main.groupby("run_id")["start_ns"].min().to_numpy())
    per_op = main.groupby(main["op"].astype(str))["start_ns"].agg(["size", "min"])
    first_op = per_op.sort_values(["size", "min"], ascending=[False, True]).index[0]
    return np.sort(main[main["op"].astype(str) == first_op]["start_ns"].to_numpy())


def steps_from_executions(ev: pd.DataFrame, main_key: tuple[str, int] | None = None
                          ) -> tuple[np.ndarray, list[float], int, str]:
    """Steps from the executions of the main module (the one with the most op time), per device.

    A step is one execution of the main program on one device, timed start to start: N devices
    (chips of one host, or hosts) run their steps side by side, so a 4-chip host that runs the
    program 100 times has 100 steps, not 400, and each step's wall time is that device's.
    ``step_of`` labels each event with its step on its own device; the count is the largest per
    device; the times are every device's steps (start to next start; the last one ends with the
    device's last event). ``main_key`` fixes the main module where other hosts decide it.
    """
    main_module, main_pid = main_key if main_key is not None else \
        ev.groupby(["module", "program_id"], observed=True)["duration_ns"].sum().idxmax()
    step_of = np.full(len(ev), -1, dtype=np.int64)
    times: list[float] = []
    counts: list[int] = []
    hosts = ev["host"].astype(str).to_numpy()
    devices = ev["device"].astype(str).to_numpy()
    starts = ev["start_ns"].to_numpy()
    ends = starts + ev["duration_ns"].to_numpy()
    is_main = (ev["module"].astype(str).to_numpy() == str(main_module)) & (ev["program_id"].to_numpy() == main_pid)
    for host, device in sorted(set(zip(hosts, devices, strict=True))):
        on_device = (hosts == host) & (devices == device)
        main = ev[on_device & is_main]
        if not len(main):
            continue
        exec_starts = execution_starts(main)
        last_end = float(ends[on_device].max())
        bounds = np.append(exec_starts, max(last_end, float(exec_starts[-1])))
        counts.append(len(exec_starts))
        times.extend(float(d) / 1e3 for d in np.diff(bounds))
        idx = np.searchsorted(exec_starts, starts, side="right") - 1
        step_of[on_device & (idx >= 0)] = idx[on_device & (idx >= 0)]
    return step_of, times, max(counts) if counts else 0, f"{main_module}({main_pid})"
