"""What a trace's op events add up to: the sums the op-stats table is built from.

The table needs no single event, only sums: per op (occurrences, time, self time, devices), per op
and step, the step wall times, and the step breakdown's per-device part. :func:`event_totals` makes
them from a trace's events; :func:`merge_totals` adds up those of several hosts read apart, and the
table built from the sum is the table of all the hosts read together
(:func:`~hlo_doctor.opstats.build.opstats_from_totals`).

Which steps count is decided over every host (:class:`StepChoice`: the annotation most marks carry,
else the devices' ``Steps`` lines, else the executions of the module with the most op time). A host
read on its own decides from its own events; :func:`choose_steps` decides from the evidence of all,
and a host whose own choice differs is summed again under the common one.

Sums run over the events a chunk at a time: a host of millions of events needs a few MiB beside its
columns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from hlo_doctor.core.handoff import quick_handoffs
from hlo_doctor.opstats.breakdown_build import BreakdownPart, breakdown_part
from hlo_doctor.opstats.breakdown_steps import SliceSums
from hlo_doctor.opstats.host_time import FrameKinds
from hlo_doctor.opstats.step_times import StepTimes
from hlo_doctor.opstats.steps import steps_from_executions, steps_from_marks
from hlo_doctor.trace import OpEvents, Trace
from hlo_doctor.trace.columns import unique_values
from hlo_doctor.trace.cwire import NUMPY_READER_ENV

try:
    import hlo_doctor.opstats._xsums as _xsums  # type: ignore[import-not-found]
except ImportError:  # (optional, as the compiled reader: the numpy loop then, with the same floats)
    _xsums = None

_CHUNK = 1 << 18
_DENSE_KEYS = 1 << 24
"""Above this many (module, program id, op) code combinations, op keys are found by sorting."""

OpKey = tuple[str, int, str]
"""(module, program id or -1, op): one row of the table."""


@dataclass(frozen=True, slots=True)
class StepChoice:
    """Which events are a capture's steps."""

    source: str
    """``annotation``, ``device-steps`` or ``module-executions``."""
    name: str | None = None
    """The step annotation's name (``annotation``)."""
    main: tuple[str, int] | None = None
    """The module whose executions are the steps (``module-executions``)."""


@dataclass(frozen=True, slots=True)
class StepEvidence:
    """What decides the steps, for :func:`choose_steps`; the evidence of several hosts adds up."""

    names: tuple[tuple[str, int, tuple[str, float]], ...] = ()
    """Step annotation names: (name, marks, (host, start) of its first mark)."""
    device_steps: bool = False
    module_ns: tuple[tuple[str, int, float], ...] = ()
    """(module, program id, op time in ns), in the order the events first name them."""


def merge_evidence(parts: Sequence[StepEvidence]) -> StepEvidence:
    """The evidence of several hosts (given in the order of their files) together."""
    names: dict[str, tuple[int, tuple[str, float]]] = {}
    module_ns: dict[tuple[str, int], float] = {}
    for e in parts:
        for name, count, first in e.names:
            had = names.get(name)
            names[name] = (count, first) if had is None else (had[0] + count, min(had[1], first))
        for module, pid, ns in e.module_ns:
            module_ns[(module, pid)] = module_ns.get((module, pid), 0.0) + ns
    return StepEvidence(
        names=tuple(sorted(((n, c, f) for n, (c, f) in names.items()), key=lambda x: x[2])),
        device_steps=any(e.device_steps for e in parts),
        module_ns=tuple((m, p, ns) for (m, p), ns in module_ns.items()))


def choose_steps(evidence: StepEvidence) -> StepChoice:
    """The steps of a capture: the annotation most marks carry (ties: the one seen first), else the
    devices' ``Steps`` lines, else the executions of the module with the most op time."""
    if evidence.names:
        return StepChoice("annotation", name=max(evidence.names, key=lambda x: x[1])[0])
    if evidence.device_steps:
        return StepChoice("device-steps")
    main = max(evidence.module_ns, key=lambda x: x[2], default=None)
    return StepChoice("module-executions", main=(main[0], main[1]) if main is not None else None)


@dataclass(frozen=True, slots=True)
class EventTotals:
    """The sums of one or more hosts' op events (see the module's docstring)."""

    keys: tuple[OpKey, ...]
    occurrences: np.ndarray
    total_ns: np.ndarray
    self_ns: np.ndarray
    devices: np.ndarray
    """Devices each op ran on."""
    steps: np.ndarray
    """The step labels that hold op events, sorted."""
    step_ns: np.ndarray
    """Op time per (key, step), ns: shape (len(keys), len(steps))."""
    step_times_us: Sequence[float]
    """Each device's (or host's) step wall times, hosts in name order (a :class:`StepTimes`)."""
    step_count: int
    """Steps of the device (or host) with the most."""
    choice: StepChoice
    evidence: StepEvidence
    span_ns: tuple[float, float]
    """First op start and last op end."""
    breakdown: tuple[BreakdownPart, ...]
    hosts: tuple[str, ...]
    """Hosts in the order their op events come."""
    device_names: tuple[str, ...]
    """Device planes in the order the op events first name them."""
    slice_sums: SliceSums | None = None
    """The breakdown's slices summed as the hosts were added, where they were not kept (the
    parts of :attr:`breakdown` then hold none: :class:`TotalsSum` ``fold_slices``)."""


def step_evidence(trace: Trace) -> StepEvidence:
    """What the trace says about its steps (see :class:`StepEvidence`)."""
    names: dict[str, tuple[int, tuple[str, float]]] = {}
    for s in trace.steps:  # sorted by (host, start)
        had = names.get(s.name)
        names[s.name] = (1, (s.host, s.start_ns)) if had is None else (had[0] + 1, had[1])
    ops = trace.ops
    module_ns: dict[tuple[str, int], float] = {}
    if not trace.steps and not trace.device_steps and len(ops):
        m, p = ops.module.codes.astype(np.int64), ops.program_id.codes.astype(np.int64)
        width = len(ops.program_id.categories) + 1
        sums = np.bincount(m * width + p, weights=ops.duration_ns)
        for k in np.flatnonzero(np.bincount(m * width + p)).tolist():
            key = (str(ops.module.categories[k // width]), int(ops.program_id.categories[k % width]))
            module_ns[key] = float(sums[k])
    return StepEvidence(tuple((n, c, f) for n, (c, f) in names.items()), bool(trace.device_steps),
                        tuple((m_, p_, ns) for (m_, p_), ns in module_ns.items()))


def _last_end(starts: np.ndarray, durations: np.ndarray) -> float:
    """``(starts + durations).max()``, a chunk of events at a time (no array of every end)."""
    return max(float((starts[a:a + _CHUNK] + durations[a:a + _CHUNK]).max()) for a in range(0, len(starts), _CHUNK))


def event_totals(trace: Trace, frame_kinds: Callable[[], FrameKinds],
                 choice: StepChoice | None = None, *, breakdown: bool = True, overlap: bool = False) -> EventTotals:
    """The sums of ``trace``'s op events, its steps decided by ``choice`` (default: from this trace
    alone). ``frame_kinds`` is called only when the breakdown classifies Python frames
    (:meth:`~hlo_doctor.opstats.host_time.FrameKinds.from_modules` of the capture's modules);
    ``breakdown=False``: no part of the step breakdown (the sums are the same). ``overlap``: the
    breakdown is built in a thread beside the sums where they are compiled (about 0.1 s less on a
    100 MiB TPU host file, at ~12 MiB more at the end of the host's read: for a process that holds no
    other host's sums)."""
    evidence = step_evidence(trace)
    choice = choice or choose_steps(evidence)
    # (Only beside the compiled sums, which leave the interpreter's lock free: numpy's loop holds it
    # more, and its temporaries beside the breakdown's would put the peak past twice the file.)
    overlap = overlap and breakdown and _xsums is not None and not os.environ.get(NUMPY_READER_ENV)
    with ThreadPoolExecutor(1, thread_name_prefix="hlo-doctor-breakdown") if overlap \
            else contextlib.nullcontext() as pool, quick_handoffs() if overlap else contextlib.nullcontext():
        later = pool.submit(breakdown_part, trace, choice.source, frame_kinds, step_name=choice.name,
                            main=choice.main) if pool is not None else None
        totals = _step_sums(trace, choice)
        part = later.result() if later is not None else \
            breakdown_part(trace, choice.source, frame_kinds, step_name=choice.name, main=choice.main) \
            if breakdown else None
    starts, durations = trace.ops.start_ns, trace.ops.duration_ns
    span = (float(starts.min()), _last_end(starts, durations)) if len(starts) else (0.0, 0.0)
    sums, times, count = totals
    return EventTotals(
        **sums, step_times_us=StepTimes(times), step_count=int(count), choice=choice,
        evidence=evidence, span_ns=span, breakdown=(part,) if part is not None else (),
        hosts=tuple(str(h) for h in trace.ops.host.categories),
        device_names=tuple(str(d) for d in trace.ops.device.categories))


def _step_sums(trace: Trace, choice: StepChoice) -> tuple[dict[str, Any], list[float], int]:
    """:func:`_sums` over the steps ``choice`` decides, with the steps' times and count."""
    # (The columns themselves: a frame of them, which loads pandas, only where the executions are the steps.)
    if choice.source == "annotation":
        step_of, times, count = steps_from_marks(trace.steps, trace.ops, by_device=False, name=choice.name)
    elif choice.source == "device-steps":
        step_of, times, count = steps_from_marks(trace.device_steps, trace.ops, by_device=True)
    else:
        step_of, times, count, _ = steps_from_executions(trace.ops.frame(), choice.main)
    return _sums(trace, step_of), times, count


def _sums(trace: Trace, step_of: np.ndarray) -> dict[str, Any]:
    """Per op and per (op, step) sums, a chunk of events at a time."""
    ops = trace.ops
    n = len(ops)
    m, p, o = (np.asarray(c.codes) for c in (ops.module, ops.program_id, ops.op))
    n_p, n_o = len(ops.program_id.categories) + 1, len(ops.op.categories) + 1
    space = (len(ops.module.categories) + 1) * n_p * n_o

    def key(a: int, b: int) -> np.ndarray:
        return (m[a:b].astype(np.int64) * n_p + p[a:b]) * n_o + o[a:b]

    chunks = [(a, min(a + _CHUNK, n)) for a in range(0, n, _CHUNK)]
    surveyed = _survey(m, p, o, n_p, n_o, space, step_of) if space <= _DENSE_KEYS else None
    if space <= _DENSE_KEYS:
        seen = surveyed[0] if surveyed is not None else np.zeros(space, bool)
        for a, b in chunks if surveyed is None else ():
            seen[key(a, b)] = True
        present = np.flatnonzero(seen)
        lookup = np.full(space, -1, np.int64)
        lookup[present] = np.arange(len(present))
        del seen

        def group(a: int, b: int) -> np.ndarray:
            return lookup[key(a, b)]
    else:
        present, inverse = np.unique(np.concatenate([key(a, b) for a, b in chunks]), return_inverse=True)

        def group(a: int, b: int) -> np.ndarray:
            return inverse[a:b]
    if surveyed is not None and surveyed[1] is not None:
        steps = surveyed[1]
    else:
        labelled = [unique_values(step_of[a:b][step_of[a:b] >= 0]) for a, b in chunks]
        steps = unique_values(np.concatenate(labelled)) if labelled else np.zeros(0, np.int64)
    g, s = len(present), len(steps)
    width = max(len(ops.device.categories), 1)
    hosts, devices = np.asarray(ops.host.codes), np.asarray(ops.device.codes)
    occurrences, total, self_ns = np.zeros(g), np.zeros(g), np.zeros(g)
    # Step-major: a chunk's events (one device's, over a run of steps) add into a block of rows.
    by_step = np.zeros((s, g))
    on_device = np.zeros((g, (len(ops.host.categories) or 1) * width), bool)
    lo = int(steps[0]) if s else 0
    place: np.ndarray | None = None
    if s and int(steps[-1]) - lo < 4 * s + (1 << 16):
        # Step labels close together (step numbers): each one's place by a table, not a search.
        place = np.zeros(int(steps[-1]) - lo + 1, np.int64)
        place[steps.astype(np.int64) - lo] = np.arange(s)

        def step_place(labels: np.ndarray) -> np.ndarray:
            return place[labels.astype(np.int64) - lo]
    else:
        def step_place(labels: np.ndarray) -> np.ndarray:
            return np.searchsorted(steps, labels)
    if space <= _DENSE_KEYS and _compiled_sums(m, p, o, n_p, n_o, lookup, ops, hosts, devices, width, step_of,
                                               place, lo, steps, (occurrences, total, self_ns, on_device, by_step)):
        chunks = []  # (summed in one compiled pass, the same floats: the loop below is its judge)
    for a, b in chunks:
        k = group(a, b)
        occurrences += np.bincount(k, weights=ops.occurrences[a:b], minlength=g)
        total += np.bincount(k, weights=ops.duration_ns[a:b], minlength=g)
        self_ns += np.bincount(k, weights=ops.self_ns[a:b], minlength=g)
        device = hosts[a:b].astype(np.int64) * width + devices[a:b]
        if device.min() == device.max():  # one device's events (a plane's): its ops, not a write per event
            on_device[np.flatnonzero(np.bincount(k, minlength=g)), device[0]] = True
        else:
            on_device[k, device] = True
        del device
        labels = step_of[a:b]
        inside = labels >= 0
        if s and inside.any():
            # Each (step, op) cell's sum over the chunk's events (added to its total as a whole, as
            # before: the same floats), over the steps the chunk spans only, not a (op x step) array
            # per chunk.
            at = step_place(labels[inside])
            first, last = int(at.min()), int(at.max())
            at -= first
            at *= g
            at += k[inside]
            part = np.bincount(at, weights=ops.duration_ns[a:b][inside], minlength=(last - first + 1) * g)
            by_step[first:last + 1] += part.reshape(last - first + 1, g)
    codes = present.tolist()
    keys = tuple((str(ops.module.categories[c // (n_p * n_o)]), int(ops.program_id.categories[c // n_o % n_p]),
                  str(ops.op.categories[c % n_o])) for c in codes)
    return {"keys": keys, "occurrences": np.rint(occurrences).astype(np.int64), "total_ns": total,
            "self_ns": self_ns, "devices": on_device.sum(axis=1).astype(np.int64), "steps": steps.astype(np.int64),
            "step_ns": np.ascontiguousarray(by_step.T)}


def _survey(m: np.ndarray, p: np.ndarray, o: np.ndarray, n_p: int, n_o: int, space: int,
            step_of: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The dense keys seen (bool [space]) and the sorted step labels >= 0 (``step_of``'s type; None
    past a table's range), by ``_xsums.survey``; None where it is not built or leaves it to numpy."""
    if _xsums is None or os.environ.get(NUMPY_READER_ENV) or not len(m):
        return None
    c = np.ascontiguousarray
    seen = np.zeros(space, np.uint8)
    got = _xsums.survey(c(m), c(p), c(o), n_p, n_o, seen, c(step_of))
    if got is None:
        return None
    lo, hi = got
    if hi < lo:
        return seen.view(bool), np.zeros(0, step_of.dtype)
    if hi - lo >= max(1 << 16, 4 * len(step_of)):
        return seen.view(bool), None
    present = np.zeros(hi - lo + 1, np.uint8)
    _xsums.mark_labels(c(step_of), lo, present)
    return seen.view(bool), (np.flatnonzero(present) + lo).astype(step_of.dtype)


def _compiled_sums(m: np.ndarray, p: np.ndarray, o: np.ndarray, n_p: int, n_o: int, lookup: np.ndarray,
                   ops: OpEvents, hosts: np.ndarray, devices: np.ndarray, width: int, step_of: np.ndarray,
                   place: np.ndarray | None, lo: int, steps: np.ndarray,
                   out: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> bool:
    """:func:`_sums`'s loop by the compiled pass (``_xsums``) into ``out`` (zeros: occurrences, total,
    self, on_device, by_step); False where it is not built or leaves the events to the numpy loop
    (an index that loop would take from an array's end), ``out`` zeros again."""
    if _xsums is None or os.environ.get(NUMPY_READER_ENV):
        return False
    c = np.ascontiguousarray
    done = _xsums.chunk_sums(c(m), c(p), c(o), n_p, n_o, c(lookup, np.int64), c(ops.occurrences),
                             c(ops.duration_ns, np.float64), c(ops.self_ns, np.float64), c(hosts), c(devices), width,
                             c(step_of), c(place if place is not None else np.zeros(0, np.int64), np.int64), lo,
                             c(steps, np.int64), _CHUNK, *out)
    if done is None:
        for array in out:
            array[...] = 0
        return False
    return True


def merge_totals(parts: Sequence[EventTotals]) -> EventTotals:
    """The totals of several hosts (in the order of their files) as one; they share one choice of
    steps (a part summed under another is summed again first: :mod:`hlo_doctor.hosts`)."""
    total = TotalsSum()
    for p in parts:
        total.add(p)
    return total.result()


class TotalsSum:
    """Hosts' totals added up one at a time, in the order of their files, as they are read: the
    sum holds one row per op and one column per step, never a host's own arrays after it is added
    (what a pod of many hosts needs). :meth:`result` is :func:`merge_totals` of the parts added,
    the same numbers added in the same order."""

    def __init__(self, *, fold_slices: bool = False) -> None:
        """``fold_slices``: keep the breakdown's slices as their sums alone (:class:`SliceSums`,
        what the breakdown's summary reads), summed as each host is added; its hosts must be new to
        the sum (a pod's files name distinct hosts), so that they are summed in the table's order."""
        self.count = 0
        self._slice_sums = SliceSums() if fold_slices else None
        self._only: EventTotals | None = None
        """The one part added, while there is one."""
        self._choice: StepChoice | None = None
        self._index: dict[OpKey, int] = {}
        self._occurrences = np.zeros(0, np.int64)
        self._devices = np.zeros(0, np.int64)
        self._total, self._self_ns = np.zeros(0), np.zeros(0)
        self._steps = np.zeros(0, np.int64)
        self._step_ns = np.zeros((0, 0))
        self._times: list[tuple[str, np.ndarray]] = []
        self._evidence: list[StepEvidence] = []
        self._breakdown: list[BreakdownPart] = []
        self._hosts: dict[str, None] = {}
        self._names: dict[str, None] = {}
        self._span = (0.0, 0.0)
        self._step_count = 0

    def add(self, p: EventTotals) -> None:
        """Add one host's totals (the next file's)."""
        if self._choice is not None and p.choice != self._choice:
            raise ValueError("totals summed under different choices of steps cannot be added up")
        self.count += 1
        self._choice = p.choice
        self._only = p if self.count == 1 else None
        for k in p.keys:
            self._index.setdefault(k, len(self._index))
        g = len(self._index)
        if g > len(self._total):  # new ops: rows of zeros
            grow = g - len(self._total)
            self._occurrences, self._devices = (np.r_[a, np.zeros(grow, np.int64)] for a in (self._occurrences, self._devices))
            self._total, self._self_ns = (np.r_[a, np.zeros(grow)] for a in (self._total, self._self_ns))
            self._step_ns = np.concatenate([self._step_ns, np.zeros((grow, self._step_ns.shape[1]))])
        steps = unique_values(np.concatenate((self._steps, p.steps))).astype(np.int64)
        if len(steps) > len(self._steps):  # new steps: columns of zeros
            grid = np.zeros((g, len(steps)))
            grid[:, np.searchsorted(steps, self._steps)] = self._step_ns
            self._steps, self._step_ns = steps, grid
        rows = np.asarray([self._index[k] for k in p.keys], np.int64)
        self._occurrences[rows] += p.occurrences
        self._devices[rows] += p.devices
        self._total[rows] += p.total_ns
        self._self_ns[rows] += p.self_ns
        self._step_ns[np.ix_(rows, np.searchsorted(self._steps, p.steps))] += p.step_ns
        self._times.append((p.hosts[0] if p.hosts else "", np.asarray(p.step_times_us, np.float64)))
        self._evidence.append(p.evidence)
        if self._slice_sums is not None:
            p = self._fold(p)
        self._breakdown.extend(p.breakdown)
        self._hosts.update(dict.fromkeys(p.hosts))
        self._names.update(dict.fromkeys(p.device_names))
        if self._only is not None:
            self._only = p
        self._span = p.span_ns if self.count == 1 else (min(self._span[0], p.span_ns[0]), max(self._span[1], p.span_ns[1]))
        self._step_count = max(self._step_count, p.step_count)

    def _fold(self, p: EventTotals) -> EventTotals:
        """``p`` with its breakdown's slices summed into :attr:`_slice_sums`, in the order the table
        puts them (:func:`device_rank`: by host, then by device plane, stable), and let go."""
        assert self._slice_sums is not None
        blocks = [c for part in p.breakdown for c in part.slices]
        if any(c.host in self._hosts for c in blocks):
            raise ValueError("a host already summed cannot have its slices folded in the table's order")
        hosts = {h: i for i, h in enumerate(dict.fromkeys([*p.hosts, *(c.host for c in blocks)]))}
        names = {d: i for i, d in enumerate(dict.fromkeys([*self._names, *p.device_names, *(c.device for c in blocks)]))}
        for c in sorted(blocks, key=lambda c: (hosts[c.host], names[c.device])):
            self._slice_sums.add(c)
        return dataclasses.replace(p, breakdown=tuple(dataclasses.replace(part, slices=()) for part in p.breakdown),
                                   slice_sums=self._slice_sums)

    def result(self) -> EventTotals:
        """The totals of every part added (the one part itself when only one was).

        Raises:
            ValueError: no part was added.
        """
        if self._only is not None:
            return self._only
        if self._choice is None:
            raise ValueError("no totals to add up")
        by_host = sorted(self._times, key=lambda x: x[0])
        return EventTotals(
            keys=tuple(self._index), occurrences=self._occurrences, total_ns=self._total, self_ns=self._self_ns,
            devices=self._devices, steps=self._steps, step_ns=self._step_ns,
            step_times_us=StepTimes(np.concatenate([times for _, times in by_host]) if by_host else ()),
            step_count=self._step_count,
            choice=self._choice, evidence=merge_evidence(self._evidence), span_ns=self._span,
            breakdown=tuple(self._breakdown), hosts=tuple(self._hosts), device_names=tuple(self._names),
            slice_sums=self._slice_sums)


def device_rank(totals: EventTotals) -> dict[tuple[str, str], int]:
    """(host, device) -> its place among the devices, as the events of all hosts read in one go order
    them (by host, then by device plane, each in the order the events first name it)."""
    width = len(totals.device_names)
    host_at = {h: i for i, h in enumerate(totals.hosts)}
    device_at = {d: i for i, d in enumerate(totals.device_names)}
    return {(h, d): host_at[h] * width + device_at[d] for h in totals.hosts for d in totals.device_names}
