"""HD004: an argmax / max / min that reads a tensor widened from a narrower dtype."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from hlo_doctor.hlo import DTYPE_BYTES, HloInstruction, HloModule
from hlo_doctor.hlo.analysis import (
    dtype_shape,
    fusion_read_of,
    only_reaches_selection,
    selection_reduces,
    value_uses,
    widening_convert_of,
)
from hlo_doctor.hlo.origin import OpOrigin, eager_op, origin_of
from hlo_doctor.lint import (
    Context,
    Example,
    Finding,
    Rule,
    Severity,
    fmt_bytes,
    fmt_duration,
    producing_convert_program,
    stage_of,
)
from hlo_doctor.lint.bandwidth import ReadPace, read_pace
from hlo_doctor.lint.host_cost import call_cost
from hlo_doctor.lint.measurement import measured_extra
from hlo_doctor.lint.paths import shown_source
from hlo_doctor.lint.testing import (
    ARGMAX_F32_TOKENS,
    ARGMAX_REDUCER,
    GPU_TWO_STAGE_ARGMAX_BF16,
    eager_convert,
)
from hlo_doctor.lint.whatif import Refused, narrow_read, refusal

_EAGER_CONVERT = eager_convert()

_CONVERT_THEN_ARGMAX = """\
HloModule jit_greedy, entry_computation_layout={(bf16[8,1024]{1,0})->(s32[8]{0}, f32[8,1024]{1,0})}

""" + ARGMAX_REDUCER + """
%fused_computation (param_0: f32[8,1024]) -> (f32[8], s32[8]) {
  %param_0 = f32[8,1024]{1,0} parameter(0)
  %iota.5 = s32[8,1024]{1,0} iota(), iota_dimension=1
  %constant.5 = f32[] constant(-inf)
  %constant.4 = s32[] constant(0)
  ROOT %reduce.2 = (f32[8]{0}, s32[8]{0}) reduce(%param_0, %iota.5, %constant.5, %constant.4), dimensions={1}, to_apply=%region_0.1
}

ENTRY %main.3 (l.1: bf16[8,1024]) -> (s32[8], f32[8,1024]) {
  %l.1 = bf16[8,1024]{1,0} parameter(0)
  %convert.1 = f32[8,1024]{1,0} convert(%l.1), metadata={op_name="jit(greedy)/convert_element_type"}
  %argmax_fusion = (f32[8]{0}, s32[8]{0}) fusion(%convert.1), kind=kLoop, calls=%fused_computation
  %gte = s32[8]{0} get-tuple-element(%argmax_fusion), index=1
  ROOT %t = (s32[8]{0}, f32[8,1024]{1,0}) tuple(%gte, %convert.1)
}
"""

# XLA:CPU's bf16 argmax: the fusion reads bf16 and widens in registers (no op_name: XLA's own).
_BF16_ARGMAX = """\
HloModule jit_greedy, entry_computation_layout={(bf16[8,1024]{1,0})->s32[8]{0}}

""" + ARGMAX_REDUCER + """
%fused_computation (param_0.1: bf16[8,1024]) -> (f32[8], s32[8]) {
  %param_0.1 = bf16[8,1024]{1,0} parameter(0)
  %convert.24 = f32[8,1024]{1,0} convert(%param_0.1)
  %iota.5 = s32[8,1024]{1,0} iota(), iota_dimension=1
  %constant.6 = f32[] constant(-inf)
  %constant.5 = s32[] constant(0)
  ROOT %reduce.10 = (f32[8]{0}, s32[8]{0}) reduce(%convert.24, %iota.5, %constant.6, %constant.5), dimensions={1}, to_apply=%region_0.1
}

ENTRY %main.3 (l.1: bf16[8,1024]) -> s32[8] {
  %l.1 = bf16[8,1024]{1,0} parameter(0)
  %iota_reduce_fusion = (f32[8]{0}, s32[8]{0}) fusion(%l.1), kind=kLoop, calls=%fused_computation
  ROOT %gte = s32[8]{0} get-tuple-element(%iota_reduce_fusion), index=1
}
"""


# As lowered (no fusion, not scheduled): a softmax whose widened logits also feed subtract/exp.
_UNOPTIMIZED_SOFTMAX = """\
HloModule jit_softmax, entry_computation_layout={(bf16[8,1024]{1,0})->f32[8,1024]{1,0}}

%region_0.1 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %main.3 (l.1: bf16[8,1024]) -> f32[8,1024] {
  %l.1 = bf16[8,1024]{1,0} parameter(0)
  %convert.1 = f32[8,1024]{1,0} convert(%l.1), metadata={op_name="jit(softmax)/convert_element_type"}
  %constant.2 = f32[] constant(-inf)
  %reduce.1 = f32[8]{0} reduce(%convert.1, %constant.2), dimensions={1}, to_apply=%region_0.1
  %b.0 = f32[8,1024]{1,0} broadcast(%reduce.1), dimensions={0}
  %sub.1 = f32[8,1024]{1,0} subtract(%convert.1, %b.0)
  ROOT %exp.0 = f32[8,1024]{1,0} exponential(%sub.1)
}
"""

# As lowered, a convert that only feeds a max: XLA will likely fuse it (reported at low severity).
_UNOPTIMIZED_MAX = _UNOPTIMIZED_SOFTMAX.replace("->f32[8,1024]{1,0}}", "->f32[8]{0}}").replace(
    ") -> f32[8,1024] {", ") -> f32[8] {").replace(
    """  %reduce.1 = f32[8]{0} reduce(%convert.1, %constant.2), dimensions={1}, to_apply=%region_0.1
  %b.0 = f32[8,1024]{1,0} broadcast(%reduce.1), dimensions={0}
  %sub.1 = f32[8,1024]{1,0} subtract(%convert.1, %b.0)
  ROOT %exp.0 = f32[8,1024]{1,0} exponential(%sub.1)""",
    "  ROOT %reduce.1 = f32[8]{0} reduce(%convert.1, %constant.2), dimensions={1}, to_apply=%region_0.1")


class OverWideRead(Rule):
    """An order-invariant reduce (argmax, max, min...) reading a tensor widened from a narrower dtype.

    What it flags:
        The entry-level op holding an argmax / argmin / max / min / top-k whose data input, as it
        sits in memory, is a widened copy: produced by a widening convert in the same program, or
        an entry parameter matching the output of a separate convert program of the run (see
        HD001 for how the programs are paired). The bytes that matter are those the op reads from
        memory: for a fusion, its operand's dtype, not the reducer's (XLA:CPU widens bf16 inside
        reducers; that costs no bandwidth and is not flagged). A widened value that also feeds other work
        (softmax's ``subtract``/``exp``) is needed in f32 and is not flagged. On unoptimized HLO
        (as lowered: no fusion, not scheduled) a convert feeding a reduce is usually fused into
        it later, so the finding is low severity and its evidence says the stage.
    Why it costs:
        A reduction over a large tensor is bound by memory bandwidth; reading f32 instead of the
        bf16 it came from moves twice the bytes for an identical result (widening is exact and
        monotone). The estimate of what is recoverable is the op's time times
        (1 - bytes needed / bytes read) on bandwidth-bound backends (TPU, GPU). On XLA:CPU the
        same only where the capture shows the reduce streaming its bytes (its achieved bandwidth
        at least half that of the capture's largest copies and converts:
        ``hlo_doctor.lint.bandwidth``); otherwise its loop bounds it (the engine's f32 argmax reads
        at 8-12% of its copy's pace, and the bf16 argmax measured slower on jaxlib 0.10.2, faster on
        0.11.2). Then, when ``diagnose`` may run a what-if (the default) and this machine has the
        capture's jax and jaxlib, the same reduction is timed here over both dtypes
        (``hlo_doctor.lint.whatif``): a faster narrow read recovers that share of the op's time; a
        slower one recovers nothing and its extra time is the fix's cost (``fix_cost_us``), which
        the fix's promise subtracts. The what-if is measured once per capture and machine and kept
        with the capture (``hlo_doctor.lint.store``); its interval sets the severity only where it
        decides (``hlo_doctor.lint.severity``). Otherwise (or when it cannot run: it says why) the
        finding says it is not priced, with both paces, and its recoverable time is unknown rather
        than 0.
    Example:
        ``jit(sample)/reduce`` (argmax) over f32[512,256000]: 500 MiB read where 250 MiB hold
        the same values; 696 us per step on TPU v5e.
    Fix:
        Pass the narrow tensor and reduce it directly; widen afterwards only what needs f32.
        For a greedy sampler: ``hlo-doctor apply-fix bf16-greedy-sampler``.
    """

    code = "HD004"
    name = "reduce.over-wide-read"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = "bf16-greedy-sampler"

    VALID = (
        Example(hlo=(GPU_TWO_STAGE_ARGMAX_BF16,), note="XLA:GPU two-stage argmax over bf16: stage 2 reads partials"),
        Example(hlo=(_BF16_ARGMAX,), note="bf16 argmax widened in registers by XLA"),
        Example(hlo=(ARGMAX_F32_TOKENS,), note="f32 input with no narrow producer in the run"),
        Example(hlo=(_UNOPTIMIZED_SOFTMAX,), note="softmax as lowered: the widened value feeds subtract/exp"),
    )
    INVALID = (
        Example(hlo=(_CONVERT_THEN_ARGMAX,), expect=("HD004 argmax_fusion",),
                note="convert materialised then reduced"),
        Example(hlo=(_EAGER_CONVERT, ARGMAX_F32_TOKENS), expect=("HD004 iota_reduce_fusion",),
                note="eager convert program feeding the argmax"),
        Example(hlo=(_UNOPTIMIZED_MAX,), expect=("HD004 reduce.1",),
                note="as lowered: low severity, the stage in the evidence"),
        Example(
            hlo=(_EAGER_CONVERT, ARGMAX_F32_TOKENS),
            opstats=({"module": "jit_sample", "op": "iota_reduce_fusion", "occurrences": 10,
                      "time_per_step_us": 100.0},
                     {"module": "jit_convert_element_type", "op": "wrapped_convert", "occurrences": 10,
                      "time_per_step_us": 40.0}),
            step_time_us=1000.0, num_steps=10, expect=("HD004 iota_reduce_fusion",),
            note="with op stats: half the time recoverable",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            seen: set[str] = set()
            for op, reduce, kind in selection_reduces(m):
                if op.name in seen:
                    continue
                read = fusion_read_of(m, op, reduce)
                if read is None:
                    continue
                widen = widening_convert_of(m, read)
                origin = ""
                evidence = [reduce.raw]
                if not only_reaches_selection(value_uses(m, read)):
                    continue  # also feeds other work (softmax's subtract/exp): the f32 is needed
                if widen is not None:
                    narrow = widen[0]
                    widened_by = (m.name, ctx.entry_op(m, read).name)
                    origin = f"widened from {narrow} by {read.name} in this program"
                    widener = origin_of(m, read)
                    evidence.insert(0, read.raw)
                else:
                    prog = producing_convert_program(ctx, m, read)
                    if prog is None:
                        continue
                    narrow = prog.narrow
                    widened_by = (prog.module.name, prog.op.name)
                    origin = (f"parameter {read.parameter_number}, produced by program "
                              f"{prog.module.name} from {narrow}")
                    widener = origin_of(prog.module, prog.convert)
                    evidence[:0] = [prog.convert.raw, read.raw]
                read_bytes = read.shape.nbytes
                needed = int(read.shape.num_elements * DTYPE_BYTES.get(narrow, 4))
                if needed >= read_bytes:
                    continue
                seen.add(op.name)
                # The bytes ratio is a time estimate only where the reduce is bandwidth-bound (TPU,
                # GPU). On XLA:CPU the capture says whether it is: the reduce's pace against the
                # same capture's copies and converts (an argmax there is usually bound by its loop,
                # and a bf16 read measured slower than f32 on jaxlib 0.10.2, faster on 0.11.2).
                fraction: float | None = 1.0 - needed / read_bytes
                note, pace_extra = "", ()
                cost_extra: tuple[tuple[str, object], ...] = ()
                if ctx.backend == "cpu":
                    pace = read_pace(ctx, m, op.name) if ctx.has_opstats else None
                    note = _cpu_note(pace) if ctx.has_opstats else "; no op stats: no time estimate"
                    if pace is None or not pace.bandwidth_bound:
                        fraction = None
                        if ctx.has_opstats:
                            fraction, note, cost_extra = _what_if(ctx, m, op, reduce, kind, read, narrow, note)
                    if pace is not None:
                        pace_extra = (("memory_bw_gibps", round(pace.op_gibps, 2)),
                                      ("stream_bw_gibps", round(pace.stream_gibps, 2)), ("stream_op", pace.stream_op))
                stage = stage_of(m, ctx.origin)
                if not stage.optimized:
                    # As lowered, XLA usually fuses the convert into the reduce later: not yet evidence.
                    note += "; unoptimized HLO: XLA may fuse the convert into the reduce, check the optimized module"
                    evidence.append(stage.evidence())
                eager = f" (run eagerly: program {m.name})" if eager_op(m) else ""
                yield ctx.finding(
                    self, m, reduce,
                    f"{kind} in {op.name}{eager} reads {dtype_shape(read.shape)} ({fmt_bytes(read_bytes)}), "
                    f"{origin}: it needs {fmt_bytes(needed)} ({read_bytes / needed:.1f}x fewer bytes); "
                    f"{_drop_widening(widener, narrow, _step_caller(ctx, m, read))}{note}",
                    fix="" if widener.framework else None,
                    recoverable_fraction=fraction,
                    evidence=tuple(evidence),
                    extra=(("bytes_read", read_bytes), ("bytes_needed", needed), ("reduce_kind", kind),
                           ("narrow_dtype", narrow), ("widened_by", widened_by), *pace_extra, *cost_extra,
                           *((("estimate", "not priced"),) if fraction is None else ())),
                    bytes_accessed=read_bytes,
                    severity=None if stage.optimized else Severity.LOW,
                )


def _what_if(ctx: Context, m: HloModule, op: HloInstruction, reduce: HloInstruction, kind: str,
             read: HloInstruction, narrow: str, note: str) -> tuple[float | None, str, tuple[tuple[str, object], ...]]:
    """On XLA:CPU, where the capture cannot say what the narrower read costs: time the same reduction
    over both dtypes on this machine (``lint.whatif``, kept with the capture and reused) and price the
    finding by their ratio. A narrower read that runs slower recovers nothing and its extra time is the
    fix's cost here (``fix_cost_us``: the fix's promise counts it against the time its other findings
    recover). The ratio's interval gives the range of what the narrower read gives back
    (``measured_net_us``: negative where it costs), which severity and the promise read. A what-if that
    cannot run says why and leaves the capture's own estimate (not priced: ``basis`` ``model``)."""
    why = refusal(ctx)
    timing = ctx.op_timing(m, op.name)
    if why or timing is None:
        why = why or "the op has no time in the capture"
        return None, f"{note}; no what-if: {why}", (("what_if_refused", why), ("basis", "model"))
    axes = tuple(int(a) for a in re.findall(r"\d+", reduce.attribute("dimensions")))
    t = narrow_read(kind, read.shape.dims, axes, read.shape.dtype, narrow, ctx.measurements)
    if isinstance(t, Refused) or not math.isfinite(t.ratio):
        why = t.reason if isinstance(t, Refused) else "the what-if timed no run"
        return None, f"{note}; no what-if: {why}", (("what_if_refused", why), ("basis", "model"))
    op_us = timing.time_per_step_us
    ms = t.measurement
    gives_back = (op_us * (1.0 - ms.high), op_us * (1.0 - ms.low))
    extra: tuple[tuple[str, object], ...] = (("what_if", t.text()), ("what_if_ratio", round(t.ratio, 3)),
                                             ("basis", "measured here"), *measured_extra(ms, gives_back, None))
    if t.ratio < 1.0:
        return 1.0 - t.ratio, f"; priced by a what-if run on this machine's XLA:CPU: {t.text()}", extra
    cost = op_us * (t.ratio - 1.0)
    return 0.0, (f"; a what-if run on this machine's XLA:CPU: {t.text()}: the narrower read is slower here "
                 f"and costs ~{fmt_duration(cost)} per step, which the fix's promise counts against it"), \
        (*extra, ("fix_cost_us", round(cost, 1)))


def _cpu_note(pace: ReadPace | None) -> str:
    """What the finding says of its time estimate on XLA:CPU."""
    if pace is None:
        return "; not priced on XLA:CPU: no large copy or convert in this capture to tell whether its bytes set its time"
    pct = f"{100.0 * pace.share:.0f}%"
    if pace.bandwidth_bound:
        return (f"; priced by bytes: the reduce reads at {pace.op_gibps:.2f} GiB/s, {pct} of the "
                f"{pace.stream_gibps:.2f} GiB/s of {pace.stream_op} in this capture")
    return (f"; not priced: on XLA:CPU the reduce reads at {pace.op_gibps:.2f} GiB/s, {pct} of the "
            f"{pace.stream_gibps:.2f} GiB/s of {pace.stream_op} in this capture, so its loop bounds it, not "
            "its bytes (a narrower read ran slower on jaxlib 0.10.2, faster on 0.11.2)")


def _step_caller(ctx: Context, m: HloModule, read: HloInstruction) -> str:
    """The function that issues the eager program producing ``read`` each step (``_sample_from_logits
    (hlo_doctor/engine/runner.py:135)``), from the Python tracer's frames; "" without them."""
    if read.opcode != "parameter":
        return ""
    prog = producing_convert_program(ctx, m, read)
    cost = call_cost(ctx, prog.module) if prog is not None else None
    if cost is None or not cost.caller_frames:
        return ""
    path, line, function = cost.caller_frames[0]
    return f"{function} ({shown_source(path, line)})"


def _drop_widening(widener: OpOrigin, narrow: str, caller: str = "") -> str:
    """What removes the widening the reduce reads, where it can be done."""
    what = "the eager astype" if widener.eager else "the widening convert"
    if widener.framework:
        return (f"{what} is {widener.where()}: reduce the {narrow} tensor yourself rather than through it, "
                f"or report it upstream")
    traced = shown_source(widener.frame.file, widener.frame.line) if widener.frame is not None and widener.line else ""
    if caller and widener.eager:
        where = f" called each step from {caller}" + (f"; first traced at {traced}" if traced else "")
    else:
        where = f"{'first traced at' if widener.eager else 'at'} {traced}" if traced else ""
    return f"drop {what}{f' ({where.strip()})' if where else ''} and reduce the {narrow} tensor"
