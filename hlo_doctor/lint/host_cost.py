"""The host time a fix removes: a removed program's dispatch and the Python frames of its call.

A standalone program launched from Python (an eager ``x.astype(...)``: ``jit_convert_element_type``)
costs the step more than its device time. The trace shows, on the host's driver thread
(:mod:`hlo_doctor.trace.python_frames`), jax's dispatch of it (``PjitFunction(convert_element_type)``)
inside the Python frames of the call that exists only to issue it (``$array_methods.py:116 _astype``
-> ``lax_numpy.py astype`` -> ``_convert_element_type`` -> ``bind`` -> ``apply_primitive``).
Removing the call removes all of them. This module reads them from the trace, never a constant:

- **The call's span.** From each outermost ``PjitFunction(<name>)`` span of the program, climb the
  enclosing Python frames while they are a framework's (jax, numpy...: the frames a person does not
  edit) and hold no other dispatch and no compile: the outermost of them is the call the fix
  removes (its caller is the user's line). Without the Python tracer the span is the dispatch alone.
  ``host_us`` sums these spans; ``dispatch_us`` is the ``PjitFunction`` part, ``python_us`` the rest.
- **Its repeats.** A frame of the same name as a call's outermost frame, directly in the same caller's
  frame, that issues no program (the runner's second ``astype`` to the dtype the first produced):
  it converts nothing only because the flagged call widened first, and a fix that removes the
  widening removes it too (left alone, it would become the widening). Its idle time counts.
- **What the step gets back** (critical path, per step): the device's idle time inside those spans
  and their repeats (host work the device waited for) plus the program's own device time while the
  host waited for it (inside the call's span, in ``block_until_ready``, in XLA:CPU's execution of a
  program inside a dispatch). On a host-bound GPU step the convert's kernel runs while the host is busy elsewhere and
  the host part counts; on a device-bound XLA:CPU step the host waits for the convert in
  ``block_until_ready`` and its device time counts, the call's Python mostly hidden behind other ops.

**One owner per interval of host time.** HD003 owns the spans of the standalone programs it flags;
HD015 (the host-bound step) counts only the Python outside them, and its finding says how much of
its line's idle time HD003 holds (``extra.held_by``) so that the summary never counts it twice.

Only steps inside the trace's step spans count; figures are per step (the mean over the steps of
each host's first device). Inputs without an xplane (an ``opstats.json`` export, HLO text, a rule
example) have no driver thread: :func:`call_cost` returns None and rules fall back to device time
and the dispatch spans of :mod:`hlo_doctor.lint.dispatch`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.analysis import ConvertProgram, convert_programs
from hlo_doctor.hlo.call_sites import call_line
from hlo_doctor.lint.context import Context, OpTiming
from hlo_doctor.lint.intervals import covered, in_steps, inside, parents, union
from hlo_doctor.lint.trace_capture import step_spans_ns, trace_capture
from hlo_doctor.trace.compiles import module_of_function
from hlo_doctor.trace.conventions import BACKEND_COMPILE_MARKERS, DISPATCH_PREFIX, EXECUTE_MARKER
from hlo_doctor.trace.python_frames import DriverThread, PyFrame, parse_frame

if TYPE_CHECKING:  # the op-stats package imports pandas: the rule API loads without it
    from hlo_doctor.opstats.host_time import FrameKinds, Label

PER_STEP_FLOOR = 0.5
"""A program runs "per step" from this many launches per step on one device (HD003's bar)."""
_WAIT_FUNCTIONS = frozenset({"block_until_ready"})


@dataclass(frozen=True, slots=True)
class PerStepProgram:
    """A program that only converts a dtype and runs about once per step (what HD003 flags)."""

    prog: ConvertProgram
    timing: OpTiming
    per_step: float
    """Launches per step on one device."""


def per_step_convert_programs(ctx: Context) -> Iterator[PerStepProgram]:
    """The convert-only programs launched at least :data:`PER_STEP_FLOOR` times per step."""
    if not ctx.num_steps:
        return
    for prog in convert_programs(ctx.modules):
        timing = ctx.op_timing(prog.module, prog.op.name)
        if timing is None:
            continue
        # Runs per step on one device: the table sums occurrences over devices.
        per_step = timing.occurrences_per_device / ctx.num_steps
        if per_step >= PER_STEP_FLOOR:
            yield PerStepProgram(prog, timing, per_step)


@dataclass(frozen=True, slots=True)
class CallCost:
    """What removing every call of one program saves, read from the trace (see the module's docstring).

    Totals over the traced steps; ``*_per_step`` divide by :attr:`steps`.
    """

    module: str
    calls: int
    """Outermost dispatches of the program inside the steps."""
    steps: int
    host_us: float
    """The calls' spans (dispatch and the framework frames that exist only for it), summed."""
    dispatch_us: float
    """Of which inside ``PjitFunction(<name>)`` (on XLA:CPU this holds the program's execution)."""
    idle_us: float
    """Device idle time inside the calls' spans: host work the device waited for."""
    device_us: float
    """The program's op time on the device."""
    device_waited_us: float
    """Of which the host waited for (inside the calls' spans, ``block_until_ready``, XLA:CPU's execution)."""
    repeats: int = 0
    """Frames that repeat a call in the same caller and issue nothing (a second astype to the same dtype)."""
    repeat_host_us: float = 0.0
    """Their host time."""
    repeat_idle_us: float = 0.0
    """Device idle time inside them."""
    frames: tuple[str, ...] = ()
    """The outermost frame of each kind of call (``array_methods.py:116 _astype``), or the dispatch."""
    callers: tuple[str, ...] = ()
    """The frames that made the calls (``runner.py:135 _sample_from_logits``)."""
    caller_frames: tuple[tuple[str, int, str], ...] = ()
    """The callers as (path, line, function), the path as the HLO metadata names the file (the
    tracer gives its base name) and the line of the call in its source (the tracer gives the line
    the function starts at: :func:`_call_line`)."""
    idle_by_line: tuple[tuple[str, str, float], ...] = field(default=())
    """(kind, where, device idle us in total) inside the spans, by the step breakdown's labels
    (``python``/``dispatch``/``wait``, the first frame outside the frameworks)."""

    @property
    def python_us(self) -> float:
        """Host time in the calls' framework frames outside the dispatch."""
        return max(self.host_us - self.dispatch_us, 0.0)

    def per_step(self, us: float) -> float:
        """``us`` over the steps."""
        return us / self.steps if self.steps else 0.0

    @property
    def recoverable_us(self) -> float:
        """Per step: idle time inside the calls and their repeats plus the device time the host waited for."""
        return self.per_step(self.idle_us + self.repeat_idle_us + self.device_waited_us)


# -- the calls of one program ---------------------------------------------------------------------------


def _calls(thread: DriverThread, parent: np.ndarray, module: str, kinds: FrameKinds) -> list[tuple[int, int]]:
    """(call event, dispatch event) for each outermost dispatch of ``module`` on the thread."""
    names = thread.names
    is_dispatch = np.fromiter((n.startswith(DISPATCH_PREFIX) for n in names), bool, len(names))[thread.name_code]
    is_compile = np.fromiter((any(m in n for m in BACKEND_COMPILE_MARKERS) for n in names), bool,
                             len(names))[thread.name_code]
    # Outermost dispatches (of any program) and compiles, to tell whether a frame holds only one call.
    outer = np.flatnonzero(is_dispatch & ~inside(parent, is_dispatch))
    outer_starts = thread.start_ns[outer]
    compile_starts = thread.start_ns[np.flatnonzero(is_compile)]
    calls = []
    for d in outer.tolist():
        name = names[thread.name_code[d]]
        if module_of_function(name[len(DISPATCH_PREFIX):-1]) != module:
            continue
        call = d
        while (p := int(parent[call])) >= 0:
            frame = parse_frame(names[thread.name_code[p]])
            if frame is None or frame.function in _WAIT_FUNCTIONS or \
                    not kinds.is_framework(frame, called_from_framework=True):
                break  # the caller's own line (or not a Python frame): the call ends below it
            a, b = thread.start_ns[p], thread.end_ns[p]
            held = np.searchsorted(outer_starts, b, side="left") - np.searchsorted(outer_starts, a, side="left")
            compiling = np.searchsorted(compile_starts, b) - np.searchsorted(compile_starts, a)
            if held != 1 or compiling:
                break  # the frame also issues other programs (or compiles): it outlives the fix
            call = p
        calls.append((call, d))
    return calls


class _Siblings:
    """A thread's events grouped by (enclosing event, name): each group's events in the thread's
    order, found by a search (a driver thread holds 10^6 events; a pass over them per call of a
    program that runs every step is quadratic)."""

    def __init__(self, thread: DriverThread, parent: np.ndarray) -> None:
        self._width = len(thread.names) + 1
        key = (parent + 1) * self._width + thread.name_code
        self._order = np.argsort(key, kind="stable")
        self._keys = key[self._order]

    def of(self, p: int, code: int) -> np.ndarray:
        """The events directly under event ``p`` (-1: the top) named by ``code``, in order: what
        ``np.flatnonzero((parent == p) & (thread.name_code == code))`` gives."""
        k = (p + 1) * self._width + code
        return self._order[np.searchsorted(self._keys, k, "left"):np.searchsorted(self._keys, k, "right")]


def _repeats(thread: DriverThread, parent: np.ndarray, calls: list[tuple[int, int]], siblings: _Siblings) -> list[int]:
    """Frames that repeat a call in the same caller's frame and issue no program and no compile.

    An eager ``x.astype(f32)`` issued twice in one function (the second to the dtype the first
    produced: ``$array_methods.py:116 _astype`` again, with no dispatch inside): the repeat converts
    nothing only because the flagged call widened before it; a fix that removes the widening removes
    it too, or it becomes the widening. Only frames of the same name (same file, line and function)
    as a call's outermost frame, directly under the same caller event, count; the tracer does not
    say which array a frame converts, so such a frame is taken as the same value converted again.
    """
    names = thread.names
    busy = np.fromiter((n.startswith(DISPATCH_PREFIX) or any(m in n for m in BACKEND_COMPILE_MARKERS)
                        for n in names), bool, len(names))[thread.name_code]
    busy_starts = thread.start_ns[np.flatnonzero(busy)]
    taken = {c for c, _ in calls}
    out: list[int] = []
    for c, d in calls:
        p = int(parent[c])
        if c == d or p < 0:
            continue  # a bare dispatch has no frame to repeat; a top-level frame no caller
        for r in siblings.of(p, int(thread.name_code[c])).tolist():
            a, b = thread.start_ns[r], thread.end_ns[r]
            if r in taken or np.searchsorted(busy_starts, b) - np.searchsorted(busy_starts, a):
                continue
            taken.add(r)
            out.append(r)
    return sorted(out)


def wait_spans(thread: DriverThread, cpu: bool) -> tuple[np.ndarray, np.ndarray]:
    """Spans in which the host waits for the device: ``block_until_ready``; on XLA:CPU also the
    client's execution of a program (its threads run it while the host waits)."""
    names = thread.names
    wanted = np.fromiter(((f := parse_frame(n)) is not None and f.function in _WAIT_FUNCTIONS
                          or (cpu and EXECUTE_MARKER in n) for n in names), bool, len(names))[thread.name_code]
    return union(thread.start_ns[wanted], thread.end_ns[wanted])


def call_cost(ctx: Context, module: HloModule | str) -> CallCost | None:
    """What removing ``module``'s calls saves per step, from the trace; None without a driver
    thread (no xplane, no Python tracer and no dispatch spans) or without a call of it in the steps."""
    return _call_cost(ctx, module if isinstance(module, str) else module.name)


@lru_cache(maxsize=8)
def _call_cost(ctx: Context, name: str) -> CallCost | None:
    # A Context hashes by identity: HD003 and HD015 ask for the same program of the same input.
    cap = trace_capture(ctx)
    if cap is None:
        return None
    from hlo_doctor.opstats.host_time import FrameKinds

    kinds = FrameKinds.from_modules(ctx.modules)
    if kinds.candidates and (target := _target_file(ctx)):
        kinds.prefer(target)
    totals = {"calls": 0, "steps": 0, "host": 0.0, "dispatch": 0.0, "idle": 0.0, "device": 0.0, "waited": 0.0,
              "repeats": 0, "repeat_host": 0.0, "repeat_idle": 0.0}
    frames: dict[str, None] = {}
    callers: dict[str, None] = {}
    caller_frames: dict[tuple[str, int, str], None] = {}
    by_line: dict[tuple[str, str], float] = {}
    found: dict[tuple[str, int, str, str, int], int] = {}
    paths: dict[PyFrame, str] = {}
    for host, thread in sorted(cap.threads.items()):
        step_lo, step_hi = step_spans_ns(ctx, host)
        steps = union(step_lo, step_hi) if len(step_lo) else None
        parent = parents(thread)
        calls = _calls(thread, parent, name, kinds)
        calls = [c for c, keep in zip(calls, in_steps(steps, np.asarray([thread.start_ns[c] for c, _ in calls])),
                                      strict=True) if keep]
        lo = np.asarray([thread.start_ns[c] for c, _ in calls], np.float64)
        hi = np.asarray([thread.end_ns[c] for c, _ in calls], np.float64)
        siblings = _Siblings(thread, parent)
        again = _repeats(thread, parent, calls, siblings)
        r_lo = np.asarray([thread.start_ns[r] for r in again], np.float64)
        r_hi = np.asarray([thread.end_ns[r] for r in again], np.float64)
        dlo = np.asarray([thread.start_ns[d] for _, d in calls], np.float64)
        dhi = np.asarray([thread.end_ns[d] for _, d in calls], np.float64)
        starts, ends, mods, _ = cap.ops.get(host, (np.zeros(0), np.zeros(0), np.zeros(0, object), np.zeros(0, object)))
        busy = union(starts, ends)
        mine = mods == name
        p_lo, p_hi = starts[mine], ends[mine]
        if steps is not None:
            p_keep = in_steps(steps, p_lo)
            p_lo, p_hi = p_lo[p_keep], p_hi[p_keep]
        totals["steps"] += len(step_lo) if len(step_lo) else ctx.num_steps
        totals["calls"] += len(lo)
        totals["host"] += float((hi - lo).sum()) / 1e3
        totals["dispatch"] += float((dhi - dlo).sum()) / 1e3
        totals["idle"] += float(((hi - lo) - covered(busy, lo, hi)).sum()) / 1e3
        totals["device"] += float((p_hi - p_lo).sum()) / 1e3
        totals["repeats"] += len(again)
        totals["repeat_host"] += float((r_hi - r_lo).sum()) / 1e3
        totals["repeat_idle"] += float(((r_hi - r_lo) - covered(busy, r_lo, r_hi)).sum()) / 1e3
        waits = wait_spans(thread, cap.backend == "cpu")
        held = union(np.r_[lo, waits[0]], np.r_[hi, waits[1]])
        totals["waited"] += float(covered(held, p_lo, p_hi).sum()) / 1e3
        for c, _ in calls:
            frames[_text(thread, c)] = None
            if (p := int(parent[c])) >= 0:
                callers[_text(thread, p)] = None
                if (f := parse_frame(thread.names[thread.name_code[p]])) is not None and f.is_python_file:
                    path = paths.get(f)
                    if path is None:  # (once per caller frame: the file system is searched for it)
                        path = paths[f] = kinds.path_of(f.file, f.function, f.line)
                    caller_frames[(path, _call_line(thread, parent, c, path, f, siblings, found), f.function)] = None
        for (kind, where), us in _idle_by_label(thread, kinds, busy, np.r_[lo, r_lo], np.r_[hi, r_hi],
                                                cap.backend == "cpu").items():
            by_line[(kind, where)] = by_line.get((kind, where), 0.0) + us
    if not totals["calls"] and not totals["device"]:
        return None
    return CallCost(
        module=name, calls=int(totals["calls"]), steps=int(totals["steps"]) or ctx.num_steps,
        host_us=totals["host"], dispatch_us=totals["dispatch"], idle_us=totals["idle"],
        device_us=totals["device"], device_waited_us=totals["waited"], repeats=int(totals["repeats"]),
        repeat_host_us=totals["repeat_host"], repeat_idle_us=totals["repeat_idle"], frames=tuple(frames),
        callers=tuple(callers), caller_frames=tuple(caller_frames), idle_by_line=tuple((k, w, us) for (k, w), us in sorted(by_line.items())))


def _call_line(thread: DriverThread, parent: np.ndarray, c: int, path: str, caller: PyFrame, siblings: _Siblings,
               found: dict[tuple[str, int, str, str, int], int]) -> int:
    """The line in the caller that makes call ``c``: the tracer names only the line the caller's
    function starts at, so the call is looked up in its source (:func:`hlo_doctor.hlo.call_sites.call_line`),
    the ``ordinal``-th call of that name among the caller's frames; the function's line when it
    cannot be found."""
    callee = parse_frame(thread.names[thread.name_code[c]])
    if callee is None:
        return caller.line
    same = siblings.of(int(parent[c]), int(thread.name_code[c]))
    ordinal = int(np.searchsorted(thread.start_ns[same], thread.start_ns[c], side="left"))
    # (Looked up once per caller, callee and ordinal: a program called every step is one lookup, not
    # a search of the file system per call.)
    key = (path, caller.line, caller.function, callee.function, ordinal)
    line = found.get(key)
    if line is None:
        line = found[key] = call_line(path, caller.line, caller.function, callee.function, ordinal) or caller.line
    return line


def _text(thread: DriverThread, i: int) -> str:
    name = thread.names[thread.name_code[i]]
    frame = parse_frame(name)
    return frame.text() if frame is not None else name


def _idle_by_label(thread: DriverThread, kinds: FrameKinds, busy: tuple[np.ndarray, np.ndarray],
                   lo: np.ndarray, hi: np.ndarray, cpu: bool) -> dict[tuple[str, str], float]:
    """Device idle time (us) inside the spans [lo, hi) by the breakdown's (kind, where) labels."""
    if not len(lo):
        return {}
    from hlo_doctor.opstats.host_time import host_segments

    seg = host_segments(thread, kinds, execution_waits=cpu)
    spans = union(lo, hi)
    out: dict[tuple[str, str], float] = {}
    # A block of spans at a time, with the segments from the first one's to the last one's: the
    # pieces inside the spans are the same as the whole thread's cut gives (each lies between cut
    # points inside its span: its edges and the bounds of the segments over it), in the same order,
    # so the sums are too; the arrays are a block's, not the thread's millions of pieces.
    first = np.searchsorted(seg.end_ns, spans[0], side="right")
    last = np.searchsorted(seg.start_ns, spans[1], side="left")
    at = 0
    while at < len(spans[0]):
        upto = at + 1
        while upto < len(spans[0]) and last[upto] - first[at] <= _PIECES_AT_ONCE:
            upto += 1
        lo_seg, hi_seg = int(first[at]), int(max(last[upto - 1], first[at]))
        _idle_pieces(seg.start_ns[lo_seg:hi_seg], seg.end_ns[lo_seg:hi_seg], seg.label[lo_seg:hi_seg],
                     (spans[0][at:upto], spans[1][at:upto]), busy, seg.labels, out)
        at = upto
    return out


_PIECES_AT_ONCE = 1 << 18
"""Segments cut at a time by :func:`_idle_by_label` (a block of spans' worth)."""


def _idle_pieces(seg_start: np.ndarray, seg_end: np.ndarray, seg_label: np.ndarray,
                 spans: tuple[np.ndarray, np.ndarray], busy: tuple[np.ndarray, np.ndarray],
                 labels: tuple[Label, ...], out: dict[tuple[str, str], float]) -> None:
    """Device idle time (us) inside ``spans`` by label, added into ``out`` piece by piece in time
    order: the segments cut at the spans' edges; each piece lies in one segment and in or out of a span."""
    cuts = np.unique(np.concatenate([seg_start, seg_end, spans[0], spans[1]]))
    a, b = cuts[:-1], cuts[1:]
    mid = (a + b) / 2
    j = np.searchsorted(spans[0], mid, side="right") - 1
    k = np.searchsorted(seg_start, mid, side="right") - 1
    keep = (j >= 0) & (mid < spans[1][np.maximum(j, 0)]) & (k >= 0) & (mid < seg_end[np.maximum(k, 0)])
    a, b, k = a[keep], b[keep], k[keep]
    idle = (b - a) - covered(busy, a, b)
    for label_code, us in zip(seg_label[k].tolist(), idle.tolist(), strict=True):
        label = labels[label_code]
        out[(label.kind, label.where)] = out.get((label.kind, label.where), 0.0) + us / 1e3


# -- HD003's spans as HD015 sees them -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Held:
    """Device idle time per step inside the spans of one program HD003 flags, at one source line."""

    code: str
    module: str
    where: str
    python_us: float
    dispatch_us: float


def held_by_removed_programs(ctx: Context, owner: str = "HD003") -> tuple[Held, ...]:
    """Per (program, line): the idle time per step inside the calls of each per-step convert program
    (HD003's spans), split into Python and dispatch as the step breakdown labels it."""
    out: list[Held] = []
    for p in per_step_convert_programs(ctx):
        cost = call_cost(ctx, p.prog.module)
        if cost is None or not cost.steps:
            continue
        lines: dict[str, dict[str, float]] = {}
        for kind, where, us in cost.idle_by_line:
            lines.setdefault(where, {}).setdefault(kind, 0.0)
            lines[where][kind] += us
        for where, kinds in sorted(lines.items()):
            out.append(Held(owner, p.prog.module.name, where, cost.per_step(kinds.get("python", 0.0)),
                            cost.per_step(kinds.get("dispatch", 0.0))))
    return tuple(out)


def _target_file(ctx: Context) -> str:
    """The file of the program ``profile`` ran for this capture (run.json's ``FILE.py:FUNC``), "" for
    another target or a capture without a run.json."""
    from hlo_doctor.lint.store import run_doc, run_folder

    doc = run_doc(run_folder(Path(ctx.origin))) if ctx.origin else None
    target = doc.get("target") if doc is not None else None
    if not isinstance(target, str) or ":" not in target:
        return ""
    path = target.rpartition(":")[0]
    return path if path.endswith(".py") else ""
