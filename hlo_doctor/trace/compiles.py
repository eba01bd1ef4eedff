"""One compile per program actually compiled, from the compile events of a trace.

A compile shows as several host events (:data:`~hlo_doctor.trace.conventions.COMPILE_MARKERS`):

- jax's dispatch missed its fast path (``cache_miss``), traced and lowered the function
  (``_pjit_lower``, ``lower_sharding_computation``), looked in its caches (``compile_or_get_cached``)
  and asked XLA to compile (``backend_compile_and_load``);
- XLA's client compiled it: XLA:CPU's ``PjRtCpuClient::Compile`` on a compiler thread while the
  Python thread waits, libtpu's ``TfrtTpuCompiler::Compile`` nested in jax's event on the same thread.

A compile is a backend compile event with the backend events nested in it or overlapping it on the
same thread, plus those of other threads of the host that it contains in time. Wrapper events
(dispatch misses, lowering) that hold no backend compile are no compile: the slow path found its
program in a cache (an eager decode holds hundreds of these, ~0.1 ms each).

A compile is named, in this order, by a stat of its events (``hlo_module``), the first execution of
a new program id on that host right after it (:func:`annotate_compiles`, at read time), and the
``PjitFunction(<name>)`` span jax dispatched it from (``jit_<name>``).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from hlo_doctor.trace.conventions import BACKEND_COMPILE_MARKERS, WRAPPER_COMPILE_MARKERS
from hlo_doctor.trace.model import CompileEvent, OpEvents, StepMark

_BACKEND = re.compile("|".join(re.escape(m) for m in BACKEND_COMPILE_MARKERS))
_WRAPPER = re.compile("|".join(re.escape(m) for m in WRAPPER_COMPILE_MARKERS))
_LOWERING = re.compile(r"_pjit_lower|lower_sharding_computation|compile_or_get_cached|_cached_compilation")
# What jax's module names keep of a function's name (``<lambda>`` -> ``jit__lambda``).
_NOT_NAME = re.compile(r"[^\w.\-]+")


@dataclass(frozen=True, slots=True)
class Compile:
    """One program compiled inside the window, with the events that make it up."""

    start_us: float
    duration_us: float
    """Its whole cost on the thread that asked for it: the outermost compile span there that holds
    this compile alone (lowering included), else the backend compile itself."""
    backend_us: float
    """XLA's compile alone (the outermost backend event)."""
    module: str
    """The program built (``jit_f``); empty when nothing in the trace names it."""
    program_id: int | None
    function: str
    """The name jax dispatched (``PjitFunction(<name>)``)."""
    frames: tuple[str, ...]
    """Python frames around that dispatch, innermost first."""
    step: int
    """The step it started in (host step marks); -1 when unknown."""
    events: tuple[CompileEvent, ...]
    """Its events: backend ones first (outermost first), then the wrappers that hold it alone."""


def _host(e: CompileEvent) -> str:
    return e.thread.split(" ", 1)[0] if e.thread else ""


def _end(e: CompileEvent) -> float:
    return e.start_us + e.duration_us


def module_of_function(function: str) -> str:
    """The module name jax gives a jitted function: ``jit_<name>`` (``<lambda>`` -> ``jit__lambda``)."""
    name = _NOT_NAME.sub("_", function).rstrip("_")
    return f"jit_{name}" if name else ""


@dataclass(slots=True)
class _Cluster:
    events: list[CompileEvent]
    start: float
    end: float


def _clusters(backend: list[CompileEvent]) -> list[_Cluster]:
    """Backend events grouped into compiles: nested or overlapping on one thread, or held in time by
    a compile of another thread of the same host (XLA's compiler thread under jax's Python thread)."""
    out: list[_Cluster] = []
    active: list[_Cluster] = []
    for e in sorted(backend, key=lambda x: (x.start_us, -x.duration_us)):
        active = [c for c in active if c.end > e.start_us]
        best = None
        for c in active:
            if _host(c.events[0]) != _host(e):
                continue
            same_thread = any(m.thread == e.thread for m in c.events)
            if same_thread or _end(e) <= c.end:
                if best is None or c.start >= best.start:
                    best = c
        if best is None:
            best = _Cluster([e], e.start_us, _end(e))
            out.append(best)
            active.append(best)
        else:
            best.events.append(e)
            best.end = max(best.end, _end(e))
    return out


def _backend_events(events: list[CompileEvent]) -> list[CompileEvent]:
    """The events that mean a compile: XLA's backend compile; without any (a jax release that names
    it otherwise), lowering, which leads to one. A dispatch miss alone is none."""
    backend = [e for e in events if _BACKEND.search(e.name)]
    return backend or [e for e in events if _LOWERING.search(e.name)]


def group_compiles(events: Iterable[CompileEvent]) -> tuple[Compile, ...]:
    """One :class:`Compile` per program compiled, in time order (see the module's docstring)."""
    events = list(events)
    backend = _backend_events(events)
    clusters = _clusters(backend)
    heads = sorted(range(len(clusters)), key=lambda i: clusters[i].start)
    head_starts = [clusters[i].start for i in heads]
    wrappers: list[list[CompileEvent]] = [[] for _ in clusters]
    taken = {id(e) for e in backend}
    for w in events:
        if id(w) in taken or not _WRAPPER.search(w.name):
            continue
        held = [heads[k] for k in range(bisect_left(head_starts, w.start_us), bisect_right(head_starts, _end(w)))
                if clusters[heads[k]].end <= _end(w) and _holds(w, clusters[heads[k]])]
        if len(held) == 1:
            wrappers[held[0]].append(w)
    return tuple(_compile(c.events, wrappers[i]) for i, c in enumerate(clusters))


def _holds(w: CompileEvent, c: _Cluster) -> bool:
    # A wrapper holds a compile asked for on its own thread (jax's Python thread).
    head = c.events[0]
    return _host(w) == _host(head) and (not w.thread or not head.thread or w.thread == head.thread)


def _compile(backend: list[CompileEvent], wrappers: list[CompileEvent]) -> Compile:
    head = backend[0]
    outer = max(wrappers, key=lambda w: w.duration_us, default=head)
    everything = [*backend, *sorted(wrappers, key=lambda w: (w.start_us, -w.duration_us))]
    module = next((e.module for e in everything if e.module), "")
    pid = next((e.program_id for e in everything if e.program_id is not None), None)
    named = next((e for e in (head, *sorted(wrappers, key=lambda w: w.duration_us)) if e.function), None)
    function = named.function if named is not None else ""
    frames = named.frames if named is not None else next((e.frames for e in everything if e.frames), ())
    step = next((e.step for e in everything if e.step >= 0), -1)
    return Compile(
        start_us=outer.start_us, duration_us=max(outer.duration_us, head.duration_us),
        backend_us=head.duration_us, module=module or module_of_function(function), program_id=pid,
        function=function, frames=frames, step=step, events=tuple(everything))


def annotate_compiles(events: Sequence[CompileEvent], steps: Sequence[StepMark],
                      ops: OpEvents) -> tuple[CompileEvent, ...]:
    """``events`` with the step each started in and, on the first event of each compile that no stat
    names, the module and program id that first ran after it on its host.

    The program a compile built runs right after it: the first program id whose first op event on
    that host starts after the compile ends (and before the next compile there ends) is taken for it.
    """
    by_host = _steps_by_host(steps)
    events = [_with_step(e, by_host) for e in events]
    backend = _backend_events(events)
    if not backend:
        return tuple(events)
    firsts = _first_runs(ops)  # (a sort of every op event: only when a compile needs it)
    if not firsts:
        return tuple(events)
    clusters = sorted(_clusters(backend), key=lambda c: c.end)
    ends_by_host: dict[str, list[float]] = {}
    for c in clusters:
        ends_by_host.setdefault(_host(c.events[0]), []).append(c.end)
    index = {id(e): i for i, e in enumerate(events)}
    for c in clusters:
        head = c.events[0]
        if any(e.module and e.program_id is not None for e in c.events):
            continue
        host = _host(head)
        runs = firsts.get(host) or (next(iter(firsts.values())) if len(firsts) == 1 and not host else None)
        if not runs:
            continue
        ends = ends_by_host[host]
        later = bisect_right(ends, c.end)
        limit = ends[later] if later < len(ends) else float("inf")
        # jax names the module after the function it dispatched: a run of another module is
        # another program (one compiled earlier that first runs now, one that runs no op).
        expected = module_of_function(next((e.function for e in c.events if e.function), ""))
        starts, what = runs
        for k in range(bisect_left(starts, c.end * 1e3), len(starts)):
            if starts[k] >= limit * 1e3:
                break
            module, pid = what[k]
            if not expected or module == expected:
                events[index[id(head)]] = replace(head, module=head.module or module, program_id=pid)
                break
    return tuple(events)


def _steps_by_host(steps: Sequence[StepMark]) -> dict[str, tuple[list[float], list[StepMark]]]:
    by_host: dict[str, list[StepMark]] = {}
    for s in steps:
        if not s.device:
            by_host.setdefault(s.host, []).append(s)
    out = {}
    for host, marks in by_host.items():
        marks.sort(key=lambda s: s.start_ns)
        out[host] = ([s.start_ns for s in marks], marks)
    return out


def _with_step(e: CompileEvent, steps: dict[str, tuple[list[float], list[StepMark]]]) -> CompileEvent:
    t = e.start_us * 1e3
    host = _host(e)
    for name in ([host] if host else list(steps)):
        if name not in steps:
            continue
        starts, marks = steps[name]
        k = bisect_right(starts, t) - 1
        # Step marks do not nest: the latest one that started before the event holds it, or none does.
        if k >= 0 and t < marks[k].start_ns + marks[k].duration_ns:
            return e if e.step == marks[k].step_num else replace(e, step=marks[k].step_num)
    return e


def _first_runs(ops: OpEvents) -> dict[str, tuple[list[float], list[tuple[str, int]]]]:
    """host -> (first start of each program id on it, sorted; its (module, program id))."""
    if not len(ops):
        return {}
    hosts = np.asarray(ops.host.codes)
    pids = np.asarray(ops.program_id.codes)
    starts = np.asarray(ops.start_ns, dtype=np.float64)
    pid_values = list(ops.program_id.categories)
    out: dict[str, tuple[list[float], list[tuple[str, int]]]] = {}
    key = hosts.astype(np.int64) * (len(pid_values) + 1) + pids
    order = np.lexsort((starts, key))
    first = order[np.r_[True, key[order][1:] != key[order][:-1]]]
    rows: dict[str, list[tuple[float, str, int]]] = {}
    for i in first.tolist():
        if pids[i] < 0:
            continue
        pid = pid_values[pids[i]]
        if not isinstance(pid, int) or pid < 0:
            continue
        host = str(ops.host[i])
        rows.setdefault(host, []).append((float(starts[i]), str(ops.module[i]), pid))
    for host, entries in rows.items():
        entries.sort()
        out[host] = ([s for s, _, _ in entries], [(m, p) for _, m, p in entries])
    return out
