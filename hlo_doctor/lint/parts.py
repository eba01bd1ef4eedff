"""A finding's recoverable time as its parts, each no larger than what the trace holds for it.

A recoverable time adds figures of different kinds: the ops' own time (what the op-stats table
says they take per step), on XLA:CPU the runtime's idle just before and after them while the host
waits (:mod:`.runtime_gaps`), and host time the device waited for (:mod:`.host_cost`: the Python and
dispatch of a removed call). A reader who sees only the total cannot tell an op of 25.1 ms "recovering"
67.6 ms from a mistake, so every finding carries its parts (:attr:`hlo_doctor.core.model.Finding.parts`)
and every view prints them beside the total.

:func:`bounded` holds each part to what the trace has for it: the op part to the op's time per step
in the table, the idle parts (the runtime's idle and the host time the device waited for) together
to the step's device idle time per step (the step breakdown), and the whole to the step. A part
that would exceed its bound is cut to it, so a total can never claim more than the trace holds.
"""

from __future__ import annotations

from hlo_doctor.lint.context import Context

__all__ = ["bounded"]


def bounded(ctx: Context, *, op: float = 0.0, op_bound: float | None = None, runtime_idle: float = 0.0,
            host: float = 0.0, compile_us: float = 0.0) -> tuple[tuple[str, float], ...]:
    """``(name, us per step)`` parts, each cut to its bound (see the module's docstring): ``op_bound``
    is the table's time per step of the ops the op part counts. Parts of 0 us are left out, the op
    part kept whenever it has a bound."""
    op = max(0.0, op)
    if op_bound is not None:
        op = min(op, max(0.0, op_bound))
    idle = max(0.0, runtime_idle) + max(0.0, host)
    cap = _idle_per_step(ctx)
    scale = cap / idle if cap is not None and idle > cap else 1.0
    runtime_idle, host = max(0.0, runtime_idle) * scale, max(0.0, host) * scale
    compile_us = max(0.0, compile_us)
    if ctx.step_time_us and op + runtime_idle + host + compile_us > ctx.step_time_us:
        # Never more than the whole step: what exceeds it comes off the idle parts first.
        over = op + runtime_idle + host + compile_us - ctx.step_time_us
        for_idle = min(over, runtime_idle + host)
        if runtime_idle + host > 0:
            f = 1.0 - for_idle / (runtime_idle + host)
            runtime_idle, host = runtime_idle * f, host * f
        op = max(0.0, op - (over - for_idle))
    parts = (("op", op), ("runtime_idle", runtime_idle), ("host", host), ("compile", compile_us))
    return tuple((name, us) for name, us in parts if us > 0.0 or (name == "op" and op_bound is not None))


def _idle_per_step(ctx: Context) -> float | None:
    """The step's device idle time per step (mean over devices and steps), None without a breakdown."""
    b = ctx.breakdown
    if b is None or not b.slice_count:
        return None
    return b.idle_us
