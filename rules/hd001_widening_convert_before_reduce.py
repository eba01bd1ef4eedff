"""HD001: a widening convert whose value only feeds argmax / max / min / top-k."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo.analysis import (
    convert_programs,
    dtype_shape,
    is_exact_widening,
    only_reaches_selection,
    selection_reduce_kind,
    value_uses,
)
from hlo_doctor.hlo.origin import OpOrigin, origin_of
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, stage_of
from hlo_doctor.lint.call_site import at_step_caller, step_caller
from hlo_doctor.lint.paths import shown_source
from hlo_doctor.lint.testing import (
    ARGMAX_F32_TOKENS,
    ARGMAX_REDUCER,
    GPU_TWO_STAGE_ARGMAX_BF16,
    eager_convert,
)

_ARGMAX_F32 = """\
HloModule jit_sample, entry_computation_layout={(f32[8,1024]{1,0})->(s32[8]{0}, f32[8,1024]{1,0})}

""" + ARGMAX_REDUCER + """
%fused_computation (param_0: f32[8,1024]) -> (f32[8], s32[8]) {
  %param_0 = f32[8,1024]{1,0} parameter(0)
  %iota.5 = s32[8,1024]{1,0} iota(), iota_dimension=1
  %constant.5 = f32[] constant(-inf)
  %constant.4 = s32[] constant(0)
  ROOT %reduce.2 = (f32[8]{0}, s32[8]{0}) reduce(%param_0, %iota.5, %constant.5, %constant.4), dimensions={1}, to_apply=%region_0.1, metadata={op_name="jit(sample)/reduce" source_file="sampling.py" source_line=125}
}

ENTRY %main.3 (logits.1: f32[8,1024]) -> (s32[8], f32[8,1024]) {
  %logits.1 = f32[8,1024]{1,0} parameter(0)
  %iota_reduce_fusion = (f32[8]{0}, s32[8]{0}) fusion(%logits.1), kind=kLoop, calls=%fused_computation
  %copy = f32[8,1024]{1,0} copy(%logits.1)
  %gte = s32[8]{0} get-tuple-element(%iota_reduce_fusion), index=1
  ROOT %tuple = (s32[8]{0}, f32[8,1024]{1,0}) tuple(%gte, %copy)
}
"""

_EAGER_CONVERT = eager_convert("runner.py:210")

_FUSED_WIDEN_ARGMAX = """\
HloModule jit_greedy, entry_computation_layout={(bf16[8,1024]{1,0})->s32[8]{0}}

""" + ARGMAX_REDUCER + """
%fused_computation (param_0.1: bf16[8,1024]) -> (f32[8], s32[8]) {
  %param_0.1 = bf16[8,1024]{1,0} parameter(0)
  %convert_element_type.0 = f32[8,1024]{1,0} convert(%param_0.1), metadata={op_name="jit(greedy)/convert_element_type" source_file="greedy.py" source_line=7}
  %iota.5 = s32[8,1024]{1,0} iota(), iota_dimension=1
  %constant.5 = f32[] constant(-inf)
  %constant.4 = s32[] constant(0)
  ROOT %reduce.2 = (f32[8]{0}, s32[8]{0}) reduce(%convert_element_type.0, %iota.5, %constant.5, %constant.4), dimensions={1}, to_apply=%region_0.1
}

ENTRY %main.3 (l.1: bf16[8,1024]) -> s32[8] {
  %l.1 = bf16[8,1024]{1,0} parameter(0)
  %iota_reduce_fusion = (f32[8]{0}, s32[8]{0}) fusion(%l.1), kind=kLoop, calls=%fused_computation
  ROOT %gte = s32[8]{0} get-tuple-element(%iota_reduce_fusion), index=1
}
"""

# XLA:CPU widens a bf16 argmax itself; its convert carries no op_name metadata (not the user's).
_XLA_WIDENED_ARGMAX = _FUSED_WIDEN_ARGMAX.replace(
    ', metadata={op_name="jit(greedy)/convert_element_type" source_file="greedy.py" source_line=7}', "")

_SOFTMAX = """\
HloModule jit_softmax, entry_computation_layout={(bf16[8,1024]{1,0})->f32[8,1024]{1,0}}

%region_0.1 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

%fused_computation (param_0.2: bf16[8,1024]) -> f32[8,1024] {
  %param_0.2 = bf16[8,1024]{1,0} parameter(0)
  %convert_element_type.0 = f32[8,1024]{1,0} convert(%param_0.2), metadata={op_name="jit(softmax)/convert_element_type"}
  %constant.2 = f32[] constant(-inf)
  %reduce_max.0 = f32[8]{0} reduce(%convert_element_type.0, %constant.2), dimensions={1}, to_apply=%region_0.1
  %b.0 = f32[8,1024]{1,0} broadcast(%reduce_max.0), dimensions={0}
  %sub.1 = f32[8,1024]{1,0} subtract(%convert_element_type.0, %b.0)
  ROOT %exp.0 = f32[8,1024]{1,0} exponential(%sub.1)
}

ENTRY %main.3 (l.1: bf16[8,1024]) -> f32[8,1024] {
  %l.1 = bf16[8,1024]{1,0} parameter(0)
  ROOT %f = f32[8,1024]{1,0} fusion(%l.1), kind=kLoop, calls=%fused_computation
}
"""



# astype(f32) materialised in memory, then an argmax fusion reads the f32 tensor; only tokens out.
_MATERIALISED_WIDEN_ARGMAX = ARGMAX_F32_TOKENS.replace(
    "(f32[8,1024]{1,0})->s32[8]{0}", "(bf16[8,1024]{1,0})->s32[8]{0}").replace(
    """ENTRY %main.3 (logits.1: f32[8,1024]) -> s32[8] {
  %logits.1 = f32[8,1024]{1,0} parameter(0)
""", """ENTRY %main.3 (l.1: bf16[8,1024]) -> s32[8] {
  %l.1 = bf16[8,1024]{1,0} parameter(0)
  %logits.1 = f32[8,1024]{1,0} convert(%l.1), metadata={op_name="jit(greedy)/convert_element_type" source_file="greedy.py" source_line=7}
""")


class WideningConvertBeforeReduce(Rule):
    """A bf16/f16 -> f32 convert materialised only for argmax / max / min / top-k.

    What it flags:
        An exact widening convert (bf16 or f16 to f32, f32 to f64) written in the program (its HLO
        metadata names ``convert_element_type``) whose result feeds nothing but order-invariant
        reductions (argmax, argmin, max, min, top-k). Two shapes are recognised: in one module,
        a convert materialised in memory and then reduced; and across modules: an eager
        ``astype`` compiles its own program (``jit_convert_element_type``) whose result feeds a
        parameter of the next program; the rule pairs them when the convert program's output dtype
        and dimensions equal that parameter's (and, with op stats, both run about as often) and
        the parameter only reaches such reductions. Not flagged: a convert fused into its reduction
        (the fusion reads the narrow tensor and widens in registers: XLA:GPU's
        ``input_convert_reduce_fusion``), and a widened value that is also returned (the widening
        moves to the output rather than vanishing; HD003 and HD004 hold what there is to save). On
        unoptimized HLO (as lowered: no fusion, not scheduled) nothing is fused yet and XLA usually
        fuses such a convert into its reduce: the finding is low severity and says the stage.
    Why it costs:
        Widening is exact and monotone, so argmax over the widened tensor equals argmax over the
        narrow one (ties and NaN included): the convert buys nothing for the reduce, and when it
        is materialised in memory the reduce reads twice the bytes. Converts that XLA inserts
        itself (no metadata: XLA:CPU widens bf16 reducers internally) are not flagged.
    Example:
        ``logits = logits.astype(jnp.float32); tokens = jnp.argmax(logits, -1)``.
    Fix:
        Run the reduce on the narrow tensor; widen only what really needs f32 (logprobs), inside
        the jitted program; for an eager ``astype`` before a jitted sampler, drop it (the message
        names its line). For a greedy sampler: ``hlo-doctor apply-fix bf16-greedy-sampler``. When
        the convert is written inside a framework (no frame of code you edit in its stack), the
        message says so: reduce the narrow tensor yourself rather than through it, or report it.
    """

    code = "HD001"
    name = "convert.widening-before-argmax"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = "bf16-greedy-sampler"

    VALID = (
        Example(hlo=(GPU_TWO_STAGE_ARGMAX_BF16,), note="XLA:GPU two-stage argmax, convert fused into stage 1"),
        Example(hlo=(_XLA_WIDENED_ARGMAX,), note="argmax on bf16; XLA's own reducer widening"),
        Example(hlo=(_FUSED_WIDEN_ARGMAX,), note="astype(f32) fused into the argmax: it reads bf16"),
        Example(hlo=(_EAGER_CONVERT, _ARGMAX_F32), note="the widened value is also returned"),
        Example(hlo=(_SOFTMAX,), note="softmax needs the f32 values"),
        Example(hlo=(_EAGER_CONVERT,), note="a convert program with no consumer in the run"),
        Example(hlo=(_ARGMAX_F32,), note="argmax on an f32 input that was never narrow"),
    )
    INVALID = (
        Example(hlo=(_MATERIALISED_WIDEN_ARGMAX,), expect=("HD001 logits.1",),
                note="astype(f32) materialised, then reduced"),
        Example(hlo=(_EAGER_CONVERT, ARGMAX_F32_TOKENS), expect=("HD001 wrapped_convert",),
                note="eager astype program feeding the sampler"),
        Example(
            hlo=(_EAGER_CONVERT, ARGMAX_F32_TOKENS),
            opstats=(
                {"module": "jit_convert_element_type", "op": "wrapped_convert", "occurrences": 10,
                 "time_per_step_us": 40.0},
                {"module": "jit_sample", "op": "iota_reduce_fusion", "occurrences": 10,
                 "time_per_step_us": 90.0},
                {"module": "jit_sample", "op": "copy", "occurrences": 10, "time_per_step_us": 30.0},
            ),
            step_time_us=1000.0, num_steps=10, expect=("HD001 wrapped_convert",),
            note="with op stats: time joined from the convert program",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        yield from self._in_module(ctx)
        yield from self._across_modules(ctx)

    def _in_module(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            for inst in m.instructions():
                if inst.opcode != "convert" or "convert_element_type" not in inst.op_name:
                    continue
                src = m.operands_of(inst)
                if len(src) != 1 or not is_exact_widening(src[0].dtype, inst.dtype):
                    continue
                uses = value_uses(m, inst)
                if not only_reaches_selection(uses):
                    continue
                reduces = [u.inst for u in uses if u.kind == "reduce"]
                op = ctx.entry_op(m, inst)
                if any(u.kind == "output" for u in uses):
                    continue  # also returned: the widening moves to the output, it does not vanish
                if all(ctx.entry_op(m, r) is op for r in reduces):
                    continue  # fused with its reduce: the fusion reads the narrow tensor
                kinds = sorted({selection_reduce_kind(m, r) or "reduce" for r in reduces})
                stage = stage_of(m, ctx.origin)
                # As lowered nothing is fused yet: XLA usually fuses such a convert into its reduce.
                said = "" if stage.optimized else "; unoptimized HLO: XLA may fuse it into the reduce"
                origin = origin_of(m, inst)
                yield ctx.finding(
                    self, m, inst,
                    f"{src[0].dtype} -> {inst.dtype} convert {inst.name} only feeds "
                    f"{'/'.join(kinds)} (materialised only for the reduce); {_reduce_narrow(origin, src[0].dtype)}"
                    f"{said}",
                    recoverable_fraction=1.0, source_inst=inst,
                    severity=None if stage.optimized else Severity.LOW,
                    evidence=(inst.raw, *(r.raw for r in reduces), *(() if stage.optimized else (stage.evidence(),))),
                    extra=(("narrow_dtype", src[0].dtype), ("wide_dtype", inst.dtype)),
                    fix="" if origin.framework else None,
                )

    def _across_modules(self, ctx: Context) -> Iterator[Finding]:
        for prog in convert_programs(ctx.modules):
            for m in ctx.modules:
                if m is prog.module:
                    continue
                for p in m.entry.parameters:
                    if p.shape.dtype != prog.shape.dtype or p.shape.dims != prog.shape.dims:
                        continue
                    uses = value_uses(m, p)
                    if not only_reaches_selection(uses):
                        continue
                    if any(u.kind == "output" for u in uses):
                        continue  # also returned: HD003/HD004 hold what there is to save
                    reduces = [u.inst for u in uses if u.kind == "reduce"]
                    kinds = sorted({selection_reduce_kind(m, r) or "reduce" for r in reduces})
                    origin = origin_of(prog.module, prog.convert)
                    # The call the steps run, where the HLO names the program's first trace.
                    caller = step_caller(ctx, prog.module, origin)
                    yield at_step_caller(ctx.finding(
                        self, prog.module, prog.op,
                        f"program {prog.module.name}{_eager_call(origin, caller)} widens {prog.narrow} -> "
                        f"{dtype_shape(prog.shape)}; its result matches parameter {p.parameter_number} of {m.name}, "
                        f"which only feeds {'/'.join(kinds)}: {_pass_narrow(origin, prog.narrow, m.name)}",
                        fix="" if origin.framework else None,
                        recoverable_fraction=1.0, source_inst=prog.convert,
                        evidence=(prog.convert.raw, p.raw, *(r.raw for r in reduces)),
                        extra=(("narrow_dtype", prog.narrow), ("wide_dtype", prog.shape.dtype),
                               ("consumer_module", m.name), ("consumer_parameter", p.parameter_number)),
                    ), caller)


def _reduce_narrow(origin: OpOrigin, narrow: str) -> str:
    """What to do about a convert materialised for a reduce, where it can be done."""
    if origin.framework:
        return (f"it is written {origin.where()}: reduce the {narrow} tensor yourself rather than through it, "
                f"or report it upstream")
    return f"run the reduce on {narrow}" + (f" (the convert {origin.where()})" if origin.line else "")


def _eager_call(origin: OpOrigin, caller: tuple[str, int, str] | None = None) -> str:
    """`` (an eager astype at model.py:12)``: what the convert program is, with its line (the step's
    call, and where it was first traced, when those differ)."""
    what = "an eager astype" if origin.eager else "a program that only converts"
    if origin.framework:
        return f" ({what} issued {origin.where()})"
    if caller is not None:
        path, line, function = caller
        first = f"; {origin.where()}" if origin.line else ""
        return f" ({what} called each step from {function} at {shown_source(path, line)}{first})"
    return f" ({what} {origin.where()})" if origin.line else f" ({what}; the HLO names no line for it)"


def _pass_narrow(origin: OpOrigin, narrow: str, consumer: str) -> str:
    if origin.framework:
        return f"reduce the {narrow} tensor yourself rather than letting {origin.framework} widen it, or report it upstream"
    drop = "drop the astype" if origin.eager else "drop the convert"
    return f"{drop} and pass {narrow} to {consumer}, which reduces it directly"
