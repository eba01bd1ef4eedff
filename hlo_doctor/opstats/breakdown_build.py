"""Building the step breakdown (:mod:`hlo_doctor.opstats.breakdown`) from a trace.

Per device: the op intervals are merged into busy intervals once (sorted by start, a running
maximum of the ends), and ``busy(t)``, the busy time before ``t``, is a prefix sum over them: the
busy time of any interval is ``busy(b) - busy(a)``, for every step and every host segment at once
(numpy, no loop per op). The host's driver thread is cut into labelled segments
(:mod:`~hlo_doctor.opstats.host_time`); cutting those at the step boundaries gives pieces that
each lie in one step and one segment, whose idle time is their length minus their busy time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hlo_doctor.opstats.breakdown import HOST_KINDS, DeviceWindow, HostLine, HostThread, StepBreakdown
from hlo_doctor.opstats.breakdown_steps import SliceColumns, SliceSums, StepTable
from hlo_doctor.opstats.host_time import FrameKinds, Label, Segments, host_segments
from hlo_doctor.opstats.step_spans import StepSpans, device_index, step_spans
from hlo_doctor.trace import Trace
from hlo_doctor.trace.columns import unique_values
from hlo_doctor.trace.compiles import Compile, group_compiles
from hlo_doctor.trace.host_threads import read_host_threads
from hlo_doctor.trace.python_frames import DriverThread, parse_frame

MAX_LINES = 100
"""Host lines kept (most idle time first)."""


class _Busy:
    """The merged op intervals of one device and ``busy(t)``, the busy time before ``t`` (ns)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        # (A device's ops come in start order, and on a TPU most are an interval of their own: then
        # no array per op is sorted, gathered or copied here; a device holds close to a million.)
        if len(starts) > 1 and not bool(np.all(starts[1:] >= starts[:-1])):
            order = np.argsort(starts, kind="stable")
            s, e = starts[order], ends[order]
            del order
        else:
            s, e = starts, ends
        if len(s) and bool(np.all(s[1:] > e[:-1])) and bool(np.all(e[1:] >= e[:-1])):
            # Each op starts after the one before it ends (a TPU's ops, mostly): each is its own
            # interval, and the running maximum of the ends is the ends themselves (no copy made).
            self.start, end = s, e
        elif len(s):
            # A new busy interval starts where an op starts after every earlier op has ended; it
            # ends at the running maximum of the ends just before the next one starts.
            reach = np.maximum.accumulate(e)
            new = np.empty(len(s), bool)
            new[0] = True
            np.greater(s[1:], reach[:-1], out=new[1:])
            if int(np.count_nonzero(new)) == len(s):  # no two ops overlap: each is its own interval
                # (no index per op made for it: a device's million ops would be 8 MB of them)
                del new
                self.start, end = s, reach
            else:
                heads = np.flatnonzero(new)
                del new
                self.start = s[heads]
                last = np.empty_like(heads)
                last[:-1] = heads[1:] - 1
                last[-1] = len(s) - 1
                end = reach[last]
            del reach
        else:
            self.start, end = s, e
        # (Each interval's start and length are kept, not its end: a device holds close to a million.)
        self.length = end - self.start
        del end
        self.before = np.empty(len(self.start) + 1)
        self.before[0] = 0.0
        np.cumsum(self.length, out=self.before[1:])

    def __call__(self, t: np.ndarray) -> np.ndarray:
        if not len(self.start):
            return np.zeros(len(t))
        # In place where it can be: a block of a million host pieces makes a few arrays of its size.
        k = np.searchsorted(self.start, t, side="right")
        before = k == 0  # t before the first busy interval: none of it yet
        k -= 1
        np.maximum(k, 0, out=k)
        out = t - self.start[k]
        np.clip(out, 0.0, self.length[k], out=out)
        out += self.before[k]
        out[before] = 0.0
        return out

    @property
    def total(self) -> float:
        return float(self.before[-1])


def _definition(backend: str) -> str:
    if backend == "cpu":
        return ("busy = union of the op intervals on the host's XLA:CPU threads (XLA:CPU runs ops on host "
                "threads, several at once: overlapping ops count once)")
    return "busy = union of the device's op intervals (ops overlapping on several streams count once)"


@dataclass(frozen=True, slots=True)
class BreakdownPart:
    """The breakdown of some of a capture's devices (one host's, read on its own), before
    :func:`finish_breakdown` puts the parts together: its slices and windows, and the host time and
    device idle time of each (host, segment label), not yet per step."""

    slices: tuple[SliceColumns, ...]
    """One per device: its step slices as columns (objects are made once, by :func:`finish_breakdown`)."""
    windows: tuple[DeviceWindow, ...]
    line_idle: dict[tuple[str, Label], float]
    line_host: dict[tuple[str, Label], float]
    paths: dict[str, str]
    """File base name -> the full path the HLO metadata gives it, for the labels' files."""
    aggregated: int
    """Aggregated op events (``num_occurrences``): no place in time."""
    python_frames: bool
    dispatch_spans: bool
    driver_threads: tuple[tuple[str, str], ...]
    threads: tuple[HostThread, ...] = ()
    """Every dispatching thread of the part's hosts, the driver first."""
    notes: tuple[str, ...] = ()


def breakdown_part(trace: Trace, step_source: str,
                   frame_kinds: Callable[[], FrameKinds], *, step_name: str | None = None,
                   main: tuple[str, int] | None = None) -> BreakdownPart:
    """The breakdown of the devices of ``trace``'s op events, one host's part of a capture's (the parts
    are put together by :func:`finish_breakdown`; pandas is not needed where the steps are marks);
    ``frame_kinds`` (what
    tells a framework's frame from the user's: from the HLO modules' stacks) is called only when the
    host has Python frames to classify. ``step_name`` and ``main`` fix the step
    annotation and the main module where other hosts decide them (:func:`~hlo_doctor.opstats.step_spans.step_spans`)."""
    ev = trace.ops
    aggregated = int((ev.occurrences > 1).sum())
    which, devices, per_device = device_index(ev)
    spans = step_spans(trace, step_source, which, devices, name=step_name, main=main)
    host_threads = read_host_threads([Path(p) for p in trace.paths])
    threads = {host: ts[0] for host, ts in host_threads.items()}
    # Which of the Python tracer's files are a framework's: only needed when there are frames.
    kinds = frame_kinds() if any(t.frames for ts in host_threads.values() for t in ts) else FrameKinds.empty()
    kinds.by_definition = any(not str(p).endswith(".pb") for p in trace.paths)  # a trace JSON: no HLO paths
    compiles = group_compiles(trace.compile_events)
    segments = {host: host_segments(threads.get(host), kinds, _compiles_of(compiles, host),
                                    execution_waits=trace.backend == "cpu")
                for host in {h for h, _ in devices}}
    # The other dispatching threads, apart: the compiles are opened on the driver thread only (a
    # compile on another thread is among that thread's own events).
    others = {host: [(t, host_segments(t, kinds, execution_waits=trace.backend == "cpu")) for t in ts[1:]]
              for host, ts in host_threads.items() if host in segments}
    # The threads' events are their segments now: each thread's entry read, its columns let go (a
    # driver thread's millions of events are not held beside what the attribution makes).
    entries = {(host, t.line_id): _entry(t, kinds) for host, ts in host_threads.items() for t in ts}
    host_threads = {host: [t.without_events() for t in ts] for host, ts in host_threads.items()}
    threads = {host: ts[0] for host, ts in host_threads.items()}
    others = {host: [(t.without_events(), seg) for t, seg in pairs] for host, pairs in others.items()}
    per_thread: dict[tuple[str, int], _ThreadSums] = {}
    starts_all = ev.start_ns.astype(np.float64, copy=False)
    durations_all = ev.duration_ns.astype(np.float64, copy=False)
    timed_all = ev.occurrences <= 1
    if len(which) > 1 and not bool(np.all(which[1:] >= which[:-1])):
        # Events of one device are one run when read one plane at a time: then no copy is sorted.
        order = np.argsort(which, kind="stable")
        starts_all, durations_all, timed_all = starts_all[order], durations_all[order], timed_all[order]
        del order
    bounds = np.r_[0, np.cumsum(per_device)]
    del which
    slices: list[SliceColumns] = []
    windows: list[DeviceWindow] = []
    line_idle: dict[tuple[str, Label], float] = {}
    line_host: dict[tuple[str, Label], float] = {}
    for i, (host, device) in enumerate(devices):
        part = slice(int(bounds[i]), int(bounds[i + 1]))
        starts, durations, timed = starts_all[part], durations_all[part], timed_all[part]
        ends = starts + durations
        busy = _Busy(starts, ends) if bool(timed.all()) else _Busy(starts[timed], ends[timed])
        steps = spans[(host, device)]
        windows.append(_window(host, device, busy, starts, ends, durations,
                               steps if step_source == "device-steps" else None))
        del ends  # (not beside what the attribution makes)
        seg = segments[host]
        step_rows, piece_idle, piece_host = _attribute(host, device, busy, steps, seg, starts, durations)
        slices.append(step_rows)
        for k, us in piece_idle.items():
            line_idle[(host, seg.labels[k])] = line_idle.get((host, seg.labels[k]), 0.0) + us
        for k, us in piece_host.items():
            line_host[(host, seg.labels[k])] = line_host.get((host, seg.labels[k]), 0.0) + us
        if host in threads:
            per_thread.setdefault((host, threads[host].line_id), _ThreadSums()).add(step_rows, {}, {}, seg)
        for thread, other in others.get(host, ()):
            rows, idle, spent = _attribute(host, device, busy, steps, other, starts, durations)
            per_thread.setdefault((host, thread.line_id), _ThreadSums()).add(rows, idle, spent, other)
        del busy  # (not beside the next device's)
    paths = _label_paths(kinds, (*line_idle, *line_host))
    host_records = tuple(
        per_thread[(host, t.line_id)].record(t, i == 0, entries[(host, t.line_id)], kinds)
        for host in sorted(host_threads) for i, t in enumerate(host_threads[host]) if (host, t.line_id) in per_thread)
    return BreakdownPart(
        slices=tuple(slices), windows=tuple(windows), line_idle=line_idle, line_host=line_host, paths=paths,
        aggregated=aggregated, python_frames=any(t.frames for t in threads.values()),
        dispatch_spans=any(t.dispatches for t in threads.values()),
        driver_threads=tuple(sorted((h, t.line) for h, t in threads.items())), threads=host_records,
        notes=_json_notes(trace.paths, host_threads))


def _label_paths(kinds: FrameKinds, keys: Iterable[tuple[str, Label]]) -> dict[str, str]:
    """Base name -> full path of the labels' files; and a label's own ``where`` -> its file's path
    where several files of that base name were traced and the frame tells which (:meth:`FrameKinds.path_of`)."""
    paths: dict[str, str] = {}
    for _, label in keys:
        base = label.where.split(":", 1)[0]
        if not base:
            continue
        paths.setdefault(base, kinds.path(base))
        frame = parse_frame("$" + label.where)
        if frame is not None and base in kinds.candidates:
            own = kinds.path_of(base, frame.function, frame.line)
            if own != paths[base]:
                paths[label.where] = own
    return paths


def _json_notes(paths: Sequence[str], threads: Mapping[str, object]) -> tuple[str, ...]:
    """What a trace JSON without host thread events leaves out (an xplane says it by the notes below)."""
    json_files = [p for p in paths if not str(p).endswith(".pb")]
    if not json_files or threads:
        return ()
    return (f"{', '.join(Path(p).name for p in json_files)}: the trace JSON holds no host thread events "
            "(PjitFunction dispatch, Python frames, compiles): device busy and idle only, no host side",)


class _ThreadSums:
    """One dispatching thread's host time and device idle time, summed over its host's device steps."""

    def __init__(self) -> None:
        self.host = np.zeros(len(HOST_KINDS))
        self.idle = np.zeros(len(HOST_KINDS))
        self.steps = 0
        self.line_idle: dict[tuple[str, Label], float] = {}
        self.line_host: dict[tuple[str, Label], float] = {}

    def add(self, rows: SliceColumns, idle: Mapping[int, float], spent: Mapping[int, float], seg: Segments) -> None:
        self.host += rows.host_us.sum(axis=0)
        self.idle += rows.idle_by_kind.sum(axis=0)
        self.steps += len(rows)
        for k, us in idle.items():
            self.line_idle[(rows.host, seg.labels[k])] = self.line_idle.get((rows.host, seg.labels[k]), 0.0) + us
        for k, us in spent.items():
            self.line_host[(rows.host, seg.labels[k])] = self.line_host.get((rows.host, seg.labels[k]), 0.0) + us

    def record(self, thread: DriverThread, driver: bool, entry: str, kinds: FrameKinds) -> HostThread:
        n = max(self.steps, 1)
        paths = _label_paths(kinds, (*self.line_idle, *self.line_host))
        return HostThread(
            host=thread.host, thread=f"{thread.line} {thread.line_id}", entry=entry, driver=driver,
            dispatches=thread.dispatches, frames=thread.frames,
            host_by_kind_us={k: float(v) / n for k, v in zip(HOST_KINDS, self.host, strict=True)},
            idle_by_kind_us={k: float(v) / n for k, v in zip(HOST_KINDS, self.idle, strict=True)},
            lines=() if driver else _lines(self.line_idle, self.line_host, n, paths))


def _entry(thread: DriverThread, kinds: FrameKinds) -> str:
    """The thread's first (outermost) frame outside the frameworks, or ""."""
    user = [code for code, name in enumerate(thread.names)
            if (f := parse_frame(name)) is not None and not kinds.is_framework(f)]
    if not user:
        return ""
    hits = np.flatnonzero(np.isin(thread.name_code, user))
    return thread.names[int(thread.name_code[hits[0]])].lstrip("$") if len(hits) else ""


def finish_breakdown(parts: Sequence[BreakdownPart], step_source: str, backend: str,
                     device_rank: Mapping[tuple[str, str], int] | None = None,
                     sums: SliceSums | None = None) -> StepBreakdown:
    """The step breakdown of the parts' devices together; ``device_rank`` orders the devices (as
    the op events of all hosts read in one go would), else they keep the parts' order. ``sums``:
    the parts' slices were summed as they were read and not kept (the breakdown then holds the sums)."""
    notes: list[str] = [n for p in parts for n in p.notes]
    aggregated = sum(p.aggregated for p in parts)
    if aggregated:
        notes.append(f"{aggregated} aggregated op events (num_occurrences) have no place in time: "
                     "left out of busy time")
    columns = [c for p in parts for c in p.slices]
    windows = [w for p in parts for w in p.windows]
    if device_rank is not None:
        columns.sort(key=lambda c: device_rank[(c.host, c.device)])
        windows.sort(key=lambda w: device_rank[(w.host, w.device)])
    steps = StepTable(columns)
    line_idle: dict[tuple[str, Label], float] = {}
    line_host: dict[tuple[str, Label], float] = {}
    paths: dict[str, str] = {}
    for p in parts:
        for key, us in p.line_idle.items():
            line_idle[key] = line_idle.get(key, 0.0) + us
        for key, us in p.line_host.items():
            line_host[key] = line_host.get(key, 0.0) + us
        for base, path in p.paths.items():
            paths.setdefault(base, path)
    lines = _lines(line_idle, line_host, max(sums.count if sums is not None else len(steps), 1), paths)
    has_frames = any(p.python_frames for p in parts)
    threads = tuple(sorted(t for p in parts for t in p.driver_threads))
    if not has_frames:
        notes.append("no Python-tracer frames on the host: the host side shows dispatch and compile only "
                     "(capture with python_tracer_level=1, as 'hlo-doctor profile' does)")
    if not threads:
        notes.append("no host thread dispatched a program in the trace: device idle time is not attributed")
    # Threads of one host run at the same time: each is a row of its own (the views' threads table,
    # JSON ``threads``), never added into the step's.
    records = tuple(t for p in parts for t in p.threads)
    return StepBreakdown(
        step_source=step_source, busy_definition=_definition(backend), steps=steps,
        lines=lines, windows=tuple(windows), python_frames=has_frames,
        dispatch_spans=any(p.dispatch_spans for p in parts), driver_threads=threads, notes=tuple(notes),
        threads=records, sums=sums)


def _compiles_of(compiles: Sequence[Compile], host: str) -> list[Compile]:
    out = []
    for c in compiles:
        thread = next((e.thread for e in c.events if e.thread), "")
        if not thread or thread.split(" ", 1)[0] == host:
            out.append(c)
    return out


def _window(host: str, device: str, busy: _Busy, starts: np.ndarray, ends: np.ndarray, durations: np.ndarray,
            steps: StepSpans | None) -> DeviceWindow:
    """From the device's first op (or device step) to its last: xprof's span for device idle time."""
    lo = [float(starts.min())] if len(starts) else []
    hi = [float(ends.max())] if len(ends) else []
    if steps is not None and len(steps.start_ns):
        lo.append(float(steps.start_ns.min()))
        hi.append(float(steps.end_ns.max()))
    if not lo:
        return DeviceWindow(host, device, 0.0, 0.0, 0.0, 0.0)
    a, b = min(lo), max(hi)
    inside = busy(np.asarray([a, b]))
    return DeviceWindow(host, device, a / 1e3, (b - a) / 1e3, float(inside[1] - inside[0]) / 1e3,
                        float(durations.sum()) / 1e3)


def _attribute(host: str, device: str, busy: _Busy, steps: StepSpans, seg: Segments, op_starts: np.ndarray,
               durations: np.ndarray) -> tuple[SliceColumns, dict[int, float], dict[int, float]]:
    """Step rows of one device, and device idle time / host time (us) by segment label."""
    a, b = steps.start_ns, steps.end_ns
    bounds = busy(np.concatenate([a, b]))
    busy_us = (bounds[len(a):] - bounds[:len(a)]) / 1e3
    if len(op_starts) > 1 and not bool(np.all(op_starts[1:] >= op_starts[:-1])):
        order = np.argsort(op_starts, kind="stable")
        sorted_starts, sorted_durations = op_starts[order], durations[order]
        del order
    else:  # a device's ops in start order (the usual case): no copy
        sorted_starts, sorted_durations = op_starts, durations
    cum = np.empty(len(sorted_durations) + 1)
    cum[0] = 0.0
    np.cumsum(sorted_durations, out=cum[1:])
    op_us = (cum[np.searchsorted(sorted_starts, b, side="left")] - cum[np.searchsorted(sorted_starts, a, side="left")]) / 1e3
    kind_of = np.asarray([HOST_KINDS.index(lab.kind) for lab in seg.labels], np.int64) if seg.labels else \
        np.zeros(1, np.int64)
    n_steps, n_kinds, n_labels = len(a), len(HOST_KINDS), max(len(seg.labels), 1)
    host_flat, idle_flat = np.zeros(n_steps * n_kinds), np.zeros(n_steps * n_kinds)
    host_label, idle_label = np.zeros(n_labels), np.zeros(n_labels)
    for lo, hi, mid, j in _pieces(a, b, seg):
        k = np.searchsorted(seg.start_ns, mid, side="right") - 1
        in_seg = (k >= 0) & (mid < seg.end_ns[np.maximum(k, 0)]) if len(seg.start_ns) else np.zeros(len(mid), bool)
        label = np.where(in_seg, seg.label[np.maximum(k, 0)] if len(seg.label) else 0, 0)
        length = (hi - lo) / 1e3
        edges = busy(np.concatenate([lo, hi]))
        idle = length - (edges[len(lo):] - edges[:len(lo)]) / 1e3
        kind = kind_of[label] if len(label) else np.zeros(0, np.int64)
        host_flat += np.bincount(j * n_kinds + kind, weights=length, minlength=n_steps * n_kinds)
        idle_flat += np.bincount(j * n_kinds + kind, weights=idle, minlength=n_steps * n_kinds)
        host_label += np.bincount(label, weights=length, minlength=n_labels)
        idle_label += np.bincount(label, weights=idle, minlength=n_labels)
    host_by, idle_by = host_flat.reshape(n_steps, n_kinds), idle_flat.reshape(n_steps, n_kinds)
    wall_us = (b - a) / 1e3
    # Step time the host pieces do not cover (no segment at all) is untraced host time.
    untraced = HOST_KINDS.index("untraced")
    host_by[:, untraced] += np.maximum(wall_us - host_by.sum(axis=1), 0.0)
    idle_left = np.maximum(wall_us - busy_us, 0.0) - idle_by.sum(axis=1)
    idle_by[:, untraced] += np.maximum(idle_left, 0.0)
    rows = SliceColumns(host, device, np.asarray(steps.step, np.int64), a / 1e3, wall_us, busy_us, op_us,
                        host_by, idle_by)
    return (rows, {i: float(v) for i, v in enumerate(idle_label) if v > 0},
            {i: float(v) for i, v in enumerate(host_label) if v > 0})


_PIECES = 1 << 18
"""Pieces of host time cut at a time (a block of steps): a driver thread of millions of Python
frames is cut in blocks, so the arrays of one block are what the cut needs beside the segments."""


def _pieces(a: np.ndarray, b: np.ndarray, seg: Segments) -> Iterator[tuple[np.ndarray, ...]]:
    """The host segments cut at the step boundaries, inside a step: (start, end, middle, step index)
    of each piece, a block of steps at a time.

    The cut points are every segment boundary and step boundary in the steps' span; a block of steps
    [s0, s1) holds the pieces between its first step's start and the next block's (both are cut
    points, so no piece straddles two blocks)."""
    n = len(a)
    if not n:
        return
    block = max(1, int(n * _PIECES / max(2 * len(seg.start_ns) + 2 * n, 1)))
    last = float(b.max())
    for s0 in range(0, n, block):
        s1 = min(s0 + block, n)
        lo_t, hi_t = float(a[s0]), (float(a[s1]) if s1 < n else last)
        parts = [seg.start_ns[np.searchsorted(seg.start_ns, lo_t):np.searchsorted(seg.start_ns, hi_t, side="right")],
                 seg.end_ns[np.searchsorted(seg.end_ns, lo_t):np.searchsorted(seg.end_ns, hi_t, side="right")],
                 a[s0:s1 + 1], b[(b >= lo_t) & (b <= hi_t)], np.asarray([lo_t, hi_t])]
        cuts = unique_values(np.concatenate(parts))
        cuts = cuts[(cuts >= lo_t) & (cuts <= hi_t)]
        lo, hi = cuts[:-1], cuts[1:]
        mid = (lo + hi) / 2
        j = np.searchsorted(a, mid, side="right") - 1
        in_step = (j >= 0) & (mid < b[np.maximum(j, 0)])
        yield lo[in_step], hi[in_step], mid[in_step], j[in_step]


def _lines(idle: Mapping[tuple[str, Label], float], host: Mapping[tuple[str, Label], float], n: int,
           paths: Mapping[str, str]) -> tuple[HostLine, ...]:
    """Host lines, per device step, most idle time first; untraced time is no line."""
    merged: dict[tuple[str, str, str], list[float]] = {}
    for key in set(idle) | set(host):
        label = key[1]
        if getattr(label, "kind", "untraced") == "untraced":
            continue
        k = (label.kind, label.where, label.target)  # type: ignore[attr-defined]
        acc = merged.setdefault(k, [0.0, 0.0])
        acc[0] += idle.get(key, 0.0)
        acc[1] += host.get(key, 0.0)
    out = [HostLine(kind=kd, where=where, target=target,
                    path=paths.get(where, paths.get(where.split(":", 1)[0], "")) if where else "",
                    idle_us=v[0] / n, host_us=v[1] / n)
           for (kd, where, target), v in merged.items()]
    out.sort(key=lambda x: (-x.idle_us, -x.host_us, x.kind, x.where, x.target))
    return tuple(out[:MAX_LINES])
