"""XLA:CPU: the device idle next to a program or op that a fix removes, while the host waits.

On XLA:CPU the "device" is the host's own runtime threads. Before a program's first op they set up
its run (the result buffers), after its last op they finish it (release what it allocated), and none
of that is an op event: the trace shows it as device idle time while the driver thread waits
(``block_until_ready``, or the client's execution of the program). For a program that writes a large
buffer every step (an eager ``astype`` to float32 of the logits, a copy of them returned as an
output) these gaps are milliseconds: on the bundled engine at 64 x 256,000, 4-5 ms before the eager
convert program and 9-12 ms after the sampler's copy, per step. Removing the program (or the copy,
when it ends its program) removes them with it; what-if runs of the engine with only the copy
dropped, then also the convert, took 13.9 and 7.8 ms of idle per step out of the step
(docs/rules.md, "Promised vs measured").

:func:`runtime_gaps` reads them from the capture, per traced step: the idle interval just before a
run of the removed ops when the run starts its program's execution, and the one just after when it
ends it (up to the next op, or the step's end), counted only while the driver thread waits for the
device and not inside the removed program's own dispatch (which :mod:`.host_cost` already counts).
Only XLA:CPU: on a GPU or TPU the idle before a launch is the host's dispatch (counted there) and the
idle after a step's last kernel moves to the new last kernel rather than going away.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hlo_doctor.lint.context import Context
from hlo_doctor.lint.host_cost import wait_spans
from hlo_doctor.lint.intervals import covered, union
from hlo_doctor.lint.trace_capture import step_spans_ns, trace_capture
from hlo_doctor.trace.compiles import module_of_function
from hlo_doctor.trace.conventions import DISPATCH_PREFIX
from hlo_doctor.trace.python_frames import DriverThread


@dataclass(frozen=True, slots=True)
class RuntimeGaps:
    """Device idle next to the runs of one program (or one op of it), while the host waited; totals (us)."""

    module: str
    op: str
    """The op, or "" for the whole program."""
    steps: int
    runs: int
    """Runs of the removed ops inside the steps."""
    before_us: float
    after_us: float

    def per_step(self, us: float) -> float:
        """``us`` over the steps."""
        return us / self.steps if self.steps else 0.0

    @property
    def recoverable_us(self) -> float:
        """Per step: the gaps before and after, as removing the ops takes them out of the step."""
        return self.per_step(self.before_us + self.after_us)

    def extra(self) -> tuple[tuple[str, object], ...]:
        """The figures a finding carries (per step)."""
        return (("runtime_gap_before_us_per_step", round(self.per_step(self.before_us), 1)),
                ("runtime_gap_after_us_per_step", round(self.per_step(self.after_us), 1)))


def runtime_gaps(ctx: Context, module: str, op: str = "") -> RuntimeGaps | None:
    """The XLA:CPU runtime's idle next to ``module`` (or its op ``op``) per step; None off XLA:CPU,
    without a driver thread or step spans, or when the ops never run inside a step."""
    if ctx.backend != "cpu":
        return None
    return _runtime_gaps(ctx, module, op)


@lru_cache(maxsize=16)
def _runtime_gaps(ctx: Context, module: str, op: str) -> RuntimeGaps | None:
    cap = trace_capture(ctx)
    if cap is None:
        return None
    steps = runs = 0
    before = after = 0.0
    for host, thread in sorted(cap.threads.items()):
        step_lo, step_hi = step_spans_ns(ctx, host)
        if not len(step_lo) or host not in cap.ops:
            continue
        starts, ends, mods, names = cap.ops[host]
        order = np.argsort(starts, kind="stable")
        starts, ends, mods, names = starts[order], ends[order], mods[order], names[order]
        waiting = _waiting(thread, module)
        steps += len(step_lo)
        for lo, hi in zip(step_lo.tolist(), step_hi.tolist(), strict=True):
            a, b = np.searchsorted(starts, lo, side="left"), np.searchsorted(starts, hi, side="left")
            if a == b:
                continue
            s, e, m = starts[a:b], ends[a:b], mods[a:b]
            program = m == module
            removed = program & (names[a:b] == op) if op else program
            if not removed.any():
                continue
            reach = np.maximum.accumulate(e)
            # Runs: maximal blocks of consecutive removed ops in time order.
            edge = np.diff(np.r_[0, removed.astype(np.int8), 0])
            first, last = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1) - 1
            runs += len(first)
            # A run starts its program's execution when the op before it is another program's (or
            # none); it ends it when the op after it is another program's (or the step ends).
            opens = (first == 0) | ~program[np.maximum(first - 1, 0)]
            closes = (last == len(s) - 1) | ~program[np.minimum(last + 1, len(s) - 1)]
            gap_lo = np.where(first > 0, reach[np.maximum(first - 1, 0)], lo)[opens]
            gap_hi = s[first][opens]
            before += _waited(waiting, gap_lo, gap_hi)
            tail_lo = reach[last][closes]
            tail_hi = np.where(last < len(s) - 1, s[np.minimum(last + 1, len(s) - 1)], hi)[closes]
            after += _waited(waiting, tail_lo, tail_hi)
    if not steps or not runs:
        return None
    return RuntimeGaps(module=module, op=op, steps=steps, runs=runs, before_us=before / 1e3, after_us=after / 1e3)


def _waiting(thread: DriverThread, module: str) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint spans in which the driver thread waits for the device, less the removed program's own
    dispatches (their idle is the call's, which :mod:`.host_cost` counts)."""
    ws, we = wait_spans(thread, cpu=True)
    names = thread.names
    mine = np.fromiter((n.startswith(DISPATCH_PREFIX) and module_of_function(n[len(DISPATCH_PREFIX):-1]) == module
                        for n in names), bool, len(names))[thread.name_code]
    if not mine.any() or not len(ws):
        return ws, we
    ds, de = union(thread.start_ns[mine], thread.end_ns[mine])
    # The waits cut at the dispatches' edges; keep the pieces outside every dispatch.
    cuts = np.unique(np.concatenate([ws, we, ds, de]))
    a, b = cuts[:-1], cuts[1:]
    mid = (a + b) / 2
    k = np.searchsorted(ws, mid, side="right") - 1
    in_wait = (k >= 0) & (mid < we[np.maximum(k, 0)])
    j = np.searchsorted(ds, mid, side="right") - 1
    in_dispatch = (j >= 0) & (mid < de[np.maximum(j, 0)])
    keep = in_wait & ~in_dispatch
    return union(a[keep], b[keep])


def _waited(waiting: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> float:
    """ns of the gaps [lo, hi) during which the host waited."""
    ok = hi > lo
    if not ok.any():
        return 0.0
    return float(covered(waiting, lo[ok], hi[ok]).sum())
