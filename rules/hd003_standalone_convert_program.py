"""HD003: a program that only converts a dtype, launched every step (an eager astype)."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo.analysis import (
    ConvertProgram,
    dtype_shape,
    only_reaches_selection,
    value_uses,
)
from hlo_doctor.hlo.origin import OpOrigin, origin_of
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes
from hlo_doctor.lint.call_site import at_step_caller, step_caller
from hlo_doctor.lint.host_cost import PerStepProgram, call_cost, per_step_convert_programs
from hlo_doctor.lint.parts import bounded
from hlo_doctor.lint.paths import shown_source
from hlo_doctor.lint.runtime_gaps import runtime_gaps
from hlo_doctor.lint.testing import eager_convert

_EAGER_CONVERT = eager_convert("runner.py:210")

_SCALE = """\
HloModule jit_scale, entry_computation_layout={(bf16[8,1024]{1,0})->f32[8,1024]{1,0}}

%fused (p: bf16[8,1024]) -> f32[8,1024] {
  %p = bf16[8,1024]{1,0} parameter(0)
  %c = f32[8,1024]{1,0} convert(%p)
  %k = f32[] constant(2)
  %b = f32[8,1024]{1,0} broadcast(%k), dimensions={}
  ROOT %m = f32[8,1024]{1,0} multiply(%c, %b)
}

ENTRY %main.1 (x.1: bf16[8,1024]) -> f32[8,1024] {
  %x.1 = bf16[8,1024]{1,0} parameter(0)
  ROOT %f = f32[8,1024]{1,0} fusion(%x.1), kind=kLoop, calls=%fused
}
"""


def _rows(occurrences: int) -> tuple[dict[str, object], ...]:
    return ({"module": "jit_convert_element_type", "op": "wrapped_convert", "program_id": 7,
             "occurrences": occurrences, "time_per_step_us": 40.0 * occurrences / 10},)


class StandaloneConvertProgram(Rule):
    """A module whose only work is a dtype convert, dispatched about once per step.

    What it flags:
        A program (its own program id, usually ``jit_convert_element_type``) whose entry does
        nothing but one widening convert, with about one launch per step on one device in the
        trace (occurrences per device >= half the number of steps): an eager ``x.astype(...)``
        outside ``jit`` on the per-step path.
    Why it costs:
        The convert reads the narrow tensor and writes a wide copy to memory as a separate launch;
        the next program then reads the wide copy. As its own program it also costs the host its
        call: jax's dispatch (``PjitFunction(convert_element_type)``) and the Python frames around
        it that exist only for it (an eager astype's ``array_methods.py _astype`` down to
        ``apply_primitive``), and any repeat of that call in the same function that converts
        nothing only because the first one widened (it goes with the fix). The estimate is read
        from the trace: the device's idle time inside those calls plus the program's device time
        the host waited for (on a host-bound step the
        call's host time, on a device-bound one the convert's device time); without host events,
        the longer of its device time and its dispatch spans. On XLA:CPU also the runtime's idle
        just before and after each run while the host waits (setting up and releasing its buffers:
        ``hlo_doctor.lint.runtime_gaps``). Inside the consuming jitted program
        XLA could fuse the convert into its consumer, or drop it when the consumer does not need
        the width.
    Example:
        ``logits = logits.astype(jnp.float32)`` in the runner, before calling a jitted
        ``sample(logits)``: 1.2 ms per step for bf16 -> f32[512,256000] on TPU v5e.
    Fix:
        Move the convert inside the jitted consumer (or drop it), and rebuild any precompiled
        menu keyed on the old dtype in the same change; the message names the function that issues
        it each step (from the Python tracer's frames; else the line the HLO names).
        For a greedy sampler: ``hlo-doctor apply-fix bf16-greedy-sampler``. When the convert is
        issued inside a framework (no frame of code you edit in its stack), the message says so:
        hand it arrays already in the dtype it converts to, once, outside the step, or report it.
    """

    code = "HD003"
    name = "convert.standalone-program"
    severity = Severity.HIGH
    requires = ("hlo", "opstats")
    fix = "bf16-greedy-sampler"

    VALID = (
        Example(hlo=(_EAGER_CONVERT,), opstats=_rows(1), num_steps=10, step_time_us=1000.0,
                note="converted once (at load time), not per step"),
        Example(hlo=(_SCALE,), opstats=({"module": "jit_scale", "op": "f", "occurrences": 10,
                                         "time_per_step_us": 40.0},),
                num_steps=10, step_time_us=1000.0, note="a program with real work besides the convert"),
    )
    INVALID = (
        Example(hlo=(_EAGER_CONVERT,), opstats=_rows(10), num_steps=10, step_time_us=1000.0,
                expect=("HD003 wrapped_convert",), note="eager astype every step"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for p in per_step_convert_programs(ctx):
            prog, per_step = p.prog, p.per_step
            parts, host_extra = _recoverable(ctx, p)
            consumers = _consumers(ctx, prog)
            feeds_argmax = any(only for _, _, only in consumers)
            into = "; result matches " + ", ".join(
                f"parameter {n} of {m}" for m, n, _ in consumers) if consumers else ""
            origin = origin_of(prog.module, prog.convert)
            caller = step_caller(ctx, prog.module, origin)
            finding = ctx.finding(
                self, prog.module, prog.op,
                f"program {prog.module.name} only converts {prog.narrow} -> {dtype_shape(prog.shape)} "
                f"({fmt_bytes(prog.shape.nbytes)} written) and runs {per_step:.1f}x per step{into}: "
                f"{_move_it(origin, prog.shape.dtype, caller)}",
                recoverable_fraction=1.0, parts=parts, source_inst=prog.convert,
                # An eager convert program is compiled once and cached: its metadata names the call
                # that compiled it first (often a warm-up), which may not be the per-step caller.
                evidence=(prog.convert.raw,
                          "(the source line is the Python frame that issues it in the traced steps; the "
                          "HLO names where this cached eager program was first traced)" if caller else
                          "(the source line is where this cached eager program was first traced)"),
                fix="bf16-greedy-sampler" if feeds_argmax and not origin.framework else "",
                extra=(("launches_per_step", round(per_step, 2)), ("narrow_dtype", prog.narrow), *host_extra),
            )
            # The frame that runs the eager op each step is the line to edit, not the warm-up's.
            yield at_step_caller(finding, caller)


def _recoverable(ctx: Context, p: PerStepProgram) -> tuple[tuple[tuple[str, float], ...],
                                                             tuple[tuple[str, object], ...]]:
    """What removing the program gives the step back per step, as its parts (op time, the runtime's
    idle, host time: :func:`hlo_doctor.lint.parts.bounded`), and the host figures behind them.

    From the trace (hlo_doctor.lint.host_cost): its device time the host waited for (the op part);
    the device's idle time inside the calls that issue it (its dispatch and the framework frames
    around it that exist only for it, e.g. an eager astype's) and inside their repeats in the same
    caller that issue nothing (a second astype to the dtype the first produced, which goes with it):
    the host part. Without a driver thread in the input: the longer of its device time and its
    dispatch spans (the host waits to launch it; the device waits for the launch), the excess of the
    dispatch over the device time being host time. On XLA:CPU also the runtime's idle just before
    and after each run of it while the host waited (setting up and releasing its buffers:
    :mod:`hlo_doctor.lint.runtime_gaps`).
    """
    cost = call_cost(ctx, p.prog.module)
    # XLA:CPU: the runtime's idle before and after the program, while the host waited (lint.runtime_gaps).
    gaps = runtime_gaps(ctx, p.prog.module.name)
    gap_us, gap_extra = (gaps.recoverable_us, gaps.extra()) if gaps is not None else (0.0, ())
    if cost is not None and cost.calls:
        parts = bounded(ctx, op=cost.per_step(cost.device_waited_us), op_bound=p.timing.time_per_step_us,
                        runtime_idle=gap_us,
                        host=cost.per_step(cost.idle_us + cost.repeat_idle_us))
        return parts, (*gap_extra,
            ("host_us_per_step", round(cost.per_step(cost.host_us), 1)),
            ("host_dispatch_us_per_step", round(cost.per_step(cost.dispatch_us), 1)),
            ("host_python_us_per_step", round(cost.per_step(cost.python_us), 1)),
            ("idle_us_per_step", round(cost.per_step(cost.idle_us), 1)),
            ("device_waited_us_per_step", round(cost.per_step(cost.device_waited_us), 1)),
            ("repeat_host_us_per_step", round(cost.per_step(cost.repeat_host_us), 1)),
            ("repeat_idle_us_per_step", round(cost.per_step(cost.repeat_idle_us), 1)),
            ("host_calls", tuple(cost.frames)))
    dispatch = ctx.dispatch(p.prog.module)
    host_per_step = dispatch.per_call_us * p.per_step if dispatch is not None else 0.0
    extra = (("host_dispatch_us_per_step", round(host_per_step, 1)),) if dispatch else ()
    device = p.timing.time_per_step_us
    return bounded(ctx, op=device, op_bound=device, runtime_idle=gap_us, host=max(0.0, host_per_step - device)), \
        (*extra, *gap_extra)


def _consumers(ctx: Context, prog: ConvertProgram) -> list[tuple[str, int | None, bool]]:
    """(module, parameter number, only reaches argmax/outputs) for parameters the program's output fits."""
    out = []
    for m in ctx.modules:
        if m is prog.module:
            continue
        for p in m.entry.parameters:
            if p.shape.dtype == prog.shape.dtype and p.shape.dims == prog.shape.dims:
                out.append((m.name, p.parameter_number, only_reaches_selection(value_uses(m, p))))
    return out


def _move_it(origin: OpOrigin, wide: str, caller: tuple[str, int, str] | None = None) -> str:
    """What removes a per-step convert program, where it can be done."""
    what = "an eager astype" if origin.eager else "a jitted call that only converts"
    if origin.framework:
        return (f"{what} issued {origin.where()}: hand it {wide} arrays made once, outside the step, "
                f"or report it upstream")
    traced = shown_source(origin.frame.file, origin.frame.line) if origin.frame is not None and origin.line else ""
    if caller is not None:
        path, line, function = caller
        first = f"; first traced at {traced}" if traced else ""
        where = f" called each step from {function} ({shown_source(path, line)}{first})"
    elif traced:
        where = f" {'first traced at' if origin.eager else 'at'} {traced}"
    else:
        where = " (the HLO names no line for it)"
    return f"{what}{where}: move it inside the jitted consumer, or drop it"
