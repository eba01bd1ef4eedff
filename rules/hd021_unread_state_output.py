"""HD021: a program output passed back as state on every call that no program reads."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.analysis import dtype_shape
from hlo_doctor.hlo.dead_outputs import StateOutput, reads, state_outputs
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes, stage_of
from hlo_doctor.lint.op_union import overlap_ratio
from hlo_doctor.lint.parts import bounded

# XLA:CPU (jax 0.10.2) compiling ``decode.py``: a step taking its state (donated) and returning
# ``{"token": argmax(logits), "logprobs": log_softmax(logits)}``; the next call reads only the token,
# so jit dropped the log-probabilities' argument. The max is shared with the argmax (one reduce);
# the rest of the log-softmax (line 28) feeds only output 0. Source tables dropped.
_DECODE = """\
HloModule jit__decode, is_scheduled=true, input_output_alias={ {1}: (0, {}, may-alias) }, entry_computation_layout={(s32[48]{0}, f32[64,1024]{1,0}, f32[1024,64]{1,0})->(f32[48,1024]{1,0}, s32[48]{0})}, allow_spmd_sharding_propagation_to_parameters={true,true,true}, allow_spmd_sharding_propagation_to_output={true,true}
%region_2.4 (reduce_sum.3: f32[], reduce_sum.4: f32[]) -> f32[] {
  %reduce_sum.3 = f32[] parameter(0)
  %reduce_sum.4 = f32[] parameter(1)
  ROOT %reduce_sum.5 = f32[] add(%reduce_sum.3, %reduce_sum.4)
}
%fused_computation (param_0.2: f32[48,1024]) -> f32[48] {
  %param_0.2 = f32[48,1024]{1,0} parameter(0)
  %exp.2 = f32[48,1024]{1,0} exponential(%param_0.2)
  %constant.7 = f32[] constant(0)
  ROOT %reduce_sum.1 = f32[48]{0} reduce(%exp.2, %constant.7), dimensions={1}, to_apply=%region_2.4
}
%fused_computation.1 (param_0.3: f32[48,64], param_1.2: f32[64,1024]) -> f32[48,1024] {
  %param_0.3 = f32[48,64]{1,0} parameter(0)
  %param_1.2 = f32[64,1024]{1,0} parameter(1)
  ROOT %dot_general.0 = f32[48,1024]{1,0} dot(%param_0.3, %param_1.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%fused_computation.2 (param_0.5: f32[48], param_1.5: f32[48,1024], param_2.1: f32[48]) -> f32[48,1024] {
  %param_1.5 = f32[48,1024]{1,0} parameter(1)
  %param_2.1 = f32[48]{0} parameter(2)
  %sub.19 = f32[48,1024]{1,0} broadcast(%param_2.1), dimensions={0}
  %sub.18 = f32[48,1024]{1,0} subtract(%param_1.5, %sub.19)
  %param_0.5 = f32[48]{0} parameter(0)
  %sub.17 = f32[48,1024]{1,0} broadcast(%param_0.5), dimensions={0}
  ROOT %sub.16 = f32[48,1024]{1,0} subtract(%sub.18, %sub.17)
}
%fused_computation.3 (param_0.6: f32[48,1024], param_1.7: f32[48]) -> f32[48,1024] {
  %param_0.6 = f32[48,1024]{1,0} parameter(0)
  %param_1.7 = f32[48]{0} parameter(1)
  %sub.21 = f32[48,1024]{1,0} broadcast(%param_1.7), dimensions={0}
  ROOT %sub.20 = f32[48,1024]{1,0} subtract(%param_0.6, %sub.21)
}
%region_0.1 (reduce.4: f32[], reduce.5: s32[], reduce.6: f32[], reduce.7: s32[]) -> (f32[], s32[]) {
  %reduce.4 = f32[] parameter(0)
  %reduce.5 = s32[] parameter(1)
  %reduce.6 = f32[] parameter(2)
  %reduce.7 = s32[] parameter(3)
  %ne.1 = pred[] compare(%reduce.4, %reduce.4), direction=NE
  %gt.1 = pred[] compare(%reduce.4, %reduce.6), direction=GT
  %eq.1 = pred[] compare(%reduce.4, %reduce.6), direction=EQ
  %lt.3 = pred[] compare(%reduce.5, %reduce.7), direction=LT
  %or.2 = pred[] or(%gt.1, %ne.1)
  %and.1 = pred[] and(%eq.1, %lt.3)
  %select_n.3 = f32[] select(%or.2, %reduce.4, %reduce.6)
  %or.3 = pred[] or(%or.2, %and.1)
  %select_n.4 = s32[] select(%or.3, %reduce.5, %reduce.7)
  ROOT %tuple.1 = (f32[], s32[]) tuple(%select_n.3, %select_n.4)
}
%fused_computation.4 (param_0.7: f32[48,1024]) -> (f32[48], s32[48]) {
  %param_0.7 = f32[48,1024]{1,0} parameter(0)
  %iota.5 = s32[48,1024]{1,0} iota(), iota_dimension=1
  %constant.8 = f32[] constant(-inf)
  %constant.14 = s32[] constant(0)
  ROOT %reduce.2 = (f32[48]{0}, s32[48]{0}) reduce(%param_0.7, %iota.5, %constant.8, %constant.14), dimensions={1}, to_apply=%region_0.1
}
%fused_computation.5 (param_0.9: f32[1024,64], param_1.14: s32[48]) -> f32[48,64] {
  %param_0.9 = f32[1024,64]{1,0} parameter(0)
  %param_1.14 = s32[48]{0} parameter(1)
  %constant.16 = s32[] constant(0)
  %lt.1 = s32[48]{0} broadcast(%constant.16), dimensions={}
  %lt.0 = pred[48]{0} compare(%param_1.14, %lt.1), direction=LT
  %constant.15 = s32[] constant(1024)
  %add.1 = s32[48]{0} broadcast(%constant.15), dimensions={}
  %add.0 = s32[48]{0} add(%param_1.14, %add.1)
  %select_n.0 = s32[48]{0} select(%lt.0, %add.0, %param_1.14)
  %bitcast.3 = s32[48,1]{1,0} bitcast(%select_n.0)
  %gather.2 = f32[48,1,64]{2,1,0} gather(%param_0.9, %bitcast.3), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,64}
  ROOT %bitcast.2 = f32[48,64]{1,0} bitcast(%gather.2)
}
%wrapped_log_computation (param_0.10: f32[48]) -> f32[48] {
  %param_0.10 = f32[48]{0} parameter(0)
  ROOT %log.3 = f32[48]{0} log(%param_0.10)
}
ENTRY %main.6 (state__token__.1: s32[48], w.1: f32[64,1024], embed.1: f32[1024,64]) -> (f32[48,1024], s32[48]) {
  %state__token__.1 = s32[48]{0} parameter(0)
  %w.1 = f32[64,1024]{1,0} parameter(1)
  %embed.1 = f32[1024,64]{1,0} parameter(2)
  %gather_bitcast_fusion = f32[48,64]{1,0} fusion(%embed.1, %state__token__.1), kind=kLoop, calls=%fused_computation.5
  %ynn_fusion.1 = f32[48,1024]{1,0} fusion(%gather_bitcast_fusion, %w.1), kind=kCustom, calls=%fused_computation.1
  %iota_reduce_fusion = (f32[48]{0}, s32[48]{0}) fusion(%ynn_fusion.1), kind=kLoop, calls=%fused_computation.4
  %get-tuple-element.2 = s32[48]{0} get-tuple-element(%iota_reduce_fusion), index=1
  %get-tuple-element = f32[48]{0} get-tuple-element(%iota_reduce_fusion), index=0
  %broadcast_subtract_fusion.1 = f32[48,1024]{1,0} fusion(%ynn_fusion.1, %get-tuple-element), kind=kLoop, calls=%fused_computation.3
  %ynn_fusion = f32[48]{0} fusion(%broadcast_subtract_fusion.1), kind=kCustom, calls=%fused_computation
  %wrapped_log = f32[48]{0} fusion(%ynn_fusion), kind=kLoop, calls=%wrapped_log_computation
  %broadcast_subtract_fusion = f32[48,1024]{1,0} fusion(%wrapped_log, %ynn_fusion.1, %get-tuple-element), kind=kLoop, calls=%fused_computation.2, metadata={op_name="jit(_decode)/jit(log_softmax)/sub" source_file="decode.py" source_line=28}
  ROOT %tuple = (f32[48,1024]{1,0}, s32[48]{0}) tuple(%broadcast_subtract_fusion, %get-tuple-element.2)
}
"""

# Another program of the capture reads a value of the output's shape (a sampler taking the logits).
_SAMPLER = """\
HloModule jit_sample, is_scheduled=true, entry_computation_layout={(f32[48,1024]{1,0})->f32[48]{0}}
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (logprobs.1: f32[48,1024]) -> f32[48] {
  %logprobs.1 = f32[48,1024]{1,0} parameter(0)
  %zero = f32[] constant(0)
  ROOT %sum = f32[48]{0} reduce(%logprobs.1, %zero), dimensions={1}, to_apply=%add
}
"""

# No state passed back (nothing donated): the output is the caller's result.
_RESULT = _DECODE.replace("input_output_alias={ {1}: (0, {}, may-alias) }, ", "")


def _rows(module: str = "jit__decode") -> tuple[dict[str, object], ...]:
    ops = (("ynn_fusion.1", 50.0), ("iota_reduce_fusion", 30.0), ("broadcast_subtract_fusion.1", 20.0),
           ("ynn_fusion", 8.0), ("wrapped_log", 1.0), ("broadcast_subtract_fusion", 11.0))
    return tuple({"module": module, "op": op, "occurrences": 4, "time_per_step_us": us} for op, us in ops)


class UnreadStateOutput(Rule):
    """An output a step passes back as state on every call that no program of the capture reads.

    What it flags:
        In a capture: a program that passes state back (it donates an argument to an output, or
        keeps an argument no op reads) and returns an output of 64 KiB or more that its own work
        writes (not an argument passed through, not a donated buffer), when no program of the
        capture reads a value of that shape and dtype (no parameter of it with a user). jit drops
        an argument nothing reads, so the next call's matching argument is gone (or, kept with
        ``keep_unused``, unread): the step writes the value on every call for no program. Optimized
        modules only; a value the host reads (``device_get``, printing) is not seen by the capture,
        which is why the finding names the output and its line for a person to check.
    Why it costs:
        The step computes and writes the value on every call: log-probabilities of the whole
        vocabulary kept in a decode state cost a log-softmax and a [batch, vocab] write per token.
    Example:
        ``return {"token": argmax(logits), "logprobs": jax.nn.log_softmax(logits)}`` from a donated
        step whose next call reads only ``state["token"]``.
    Fix:
        Drop the value from the returned state (or compute it only when it is read, behind a flag
        that is static under jit).
    """

    code = "HD021"
    name = "output.unread-state"
    severity = Severity.MEDIUM
    requires = ("hlo", "opstats")
    fix = ""

    VALID = (
        Example(hlo=(_DECODE, _SAMPLER), opstats=_rows() + (
            {"module": "jit_sample", "op": "sum", "occurrences": 4, "time_per_step_us": 5.0},),
            step_time_us=200.0, num_steps=4, note="decode.py: a sampler program reads the output"),
        Example(hlo=(_RESULT,), opstats=_rows(), step_time_us=200.0, num_steps=4,
                note="decode.py: no state passed back, the output is the caller's result"),
    )
    INVALID = (
        Example(hlo=(_DECODE,), opstats=_rows(), step_time_us=200.0, num_steps=4,
                expect=("HD021 broadcast_subtract_fusion",),
                note="decode.py: log-probabilities in the state, read by no program (40 us of 200)"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            if not stage_of(m, ctx.origin).optimized:
                continue
            for out in state_outputs(m):
                if ctx.op_timing(m, out.producer.name) is None:
                    continue  # not run in the captured steps
                if any(reads(other, out.shape) for other in ctx.modules):
                    continue
                yield self._finding(ctx, m, out)

    def _finding(self, ctx: Context, m: HloModule, out: StateOutput) -> Finding:
        timings = {op.name: t for op in out.only_feeds if (t := ctx.op_timing(m, op.name)) is not None}
        summed = sum(t.time_per_step_us for t in timings.values())
        ratio = overlap_ratio(ctx, m.name, list(timings)) if timings else None
        time = summed * ratio if ratio is not None else summed
        kept = (f"; parameter {out.unused_parameter.parameter_number} ({out.unused_parameter.name}) of the "
                f"same shape is kept and never read" if out.unused_parameter is not None else
                "; jit dropped the matching argument of the next call as unused")
        message = (f"output {out.index} of {m.name} ({dtype_shape(out.shape)}, {fmt_bytes(out.shape.nbytes)}) is "
                   f"state written on every call that no program of the capture reads{kept}; "
                   f"{len(out.only_feeds)} ops feed only it ({time / 1000:.2f} ms per step): drop it from the "
                   f"returned state, or compute it only where it is read (unless the host reads it)")
        return ctx.finding(
            self, m, out.producer, message, source_inst=out.producer,
            parts=bounded(ctx, op=time, op_bound=summed) if timings else None,
            evidence=(out.producer.raw, m.entry.root.raw),
            extra=(("output_index", out.index), ("ops", tuple(op.name for op in out.only_feeds)),
                   ("timed_ops", tuple(timings)), ("summed_op_us_per_step", round(summed, 1)),
                   ("unused_parameter", out.unused_parameter.name if out.unused_parameter is not None else ""))
            + ((("overlap_ratio", round(ratio, 3)),) if ratio is not None else ()),
        )
