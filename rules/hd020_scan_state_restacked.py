"""HD020: per-layer state that a scan over stacked layers reads from its input stack and writes whole into a new one."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.analysis import dtype_shape
from hlo_doctor.hlo.scan_stacks import RestackedState, restacked_states, update_bytes
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes, stage_of
from hlo_doctor.lint.op_union import overlap_ratio
from hlo_doctor.lint.parts import bounded
from hlo_doctor.lint.paths import shown_source

# XLA:CPU (jax 0.10.2) compiling ``decode.py``: ``jax.lax.scan`` over 2 stacked layers with the
# f32[2,4,32,8] cache as the scan's xs and ys (donated). The body slices its layer out of the input
# stack (element 3), copies it, writes one position (line 30) and writes the whole layer into the
# output stack (element 2), which the entry fills with zeros before the loop and copies after it.
# Source tables dropped; the lines are on the ops as source_file/source_line.
_RESTACKED = """\
HloModule jit__scan, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }, entry_computation_layout={(f32[2,4,32,8]{3,2,1,0}, f32[4,8]{1,0}, s32[])->(f32[2,4,32,8]{3,2,1,0}, f32[4,8]{1,0})}, allow_spmd_sharding_propagation_to_parameters={true,true,true}, allow_spmd_sharding_propagation_to_output={true,true}
%fused_computation (param_0: f32[4,8], param_1: f32[8,8]) -> f32[4,8] {
  %param_0 = f32[4,8]{1,0} parameter(0)
  %param_1 = f32[8,8]{1,0} parameter(1)
  ROOT %dot_general.4 = f32[4,8]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%fused_computation.1 (param_0.1: f32[2,4,32,8], param_1.2: s32[], param_2.2: f32[4,32,8]) -> f32[2,4,32,8] {
  %param_0.1 = f32[2,4,32,8]{3,2,1,0} parameter(0)
  %param_2.2 = f32[4,32,8]{2,1,0} parameter(2)
  %bitcast.5 = f32[1,4,32,8]{3,2,1,0} bitcast(%param_2.2)
  %param_1.2 = s32[] parameter(1)
  %constant.33 = s32[] constant(0)
  ROOT %dynamic_update_slice.8 = f32[2,4,32,8]{3,2,1,0} dynamic-update-slice(%param_0.1, %bitcast.5, %param_1.2, %constant.33, %constant.33, /*index=5*/%constant.33), metadata={op_name="jit(_scan)/while/body/dynamic_update_slice" source_file="decode.py" source_line=40}
}
%fused_computation.2 (param_0.2: f32[4,8], param_1.6: f32[4,8], param_2.5: f32[4,32,8]) -> f32[4,8] {
  %param_0.2 = f32[4,8]{1,0} parameter(0)
  %param_2.5 = f32[4,32,8]{2,1,0} parameter(2)
  %slice.4 = f32[4,1,8]{2,1,0} slice(%param_2.5), slice={[0:4], [0:1], [0:8]}
  %bitcast.6 = f32[4,8]{1,0} bitcast(%slice.4)
  %param_1.6 = f32[4,8]{1,0} parameter(1)
  %add.16 = f32[4,8]{1,0} add(%bitcast.6, %param_1.6)
  %tanh.4 = f32[4,8]{1,0} tanh(%add.16)
  ROOT %add.15 = f32[4,8]{1,0} add(%param_0.2, %tanh.4)
}
%fused_computation.3 (param_0.5: s32[], param_1.10: f32[4,8], param_2.9: f32[1,4,32,8]) -> f32[4,32,8] {
  %param_2.9 = f32[1,4,32,8]{3,2,1,0} parameter(2)
  %bitcast.8 = f32[4,32,8]{2,1,0} bitcast(%param_2.9)
  %param_1.10 = f32[4,8]{1,0} parameter(1)
  %bitcast.7 = f32[4,1,8]{2,1,0} bitcast(%param_1.10)
  %constant.34 = s32[] constant(0)
  %param_0.5 = s32[] parameter(0)
  ROOT %dynamic_update_slice.9 = f32[4,32,8]{2,1,0} dynamic-update-slice(%bitcast.8, %bitcast.7, %constant.34, %param_0.5, %constant.34), metadata={op_name="jit(_scan)/while/body/closed_call/dynamic_update_slice" source_file="decode.py" source_line=30}
}
%fused_computation.4 (param_0.7: f32[2,8,8], param_1.11: s32[]) -> f32[8,8] {
  %param_0.7 = f32[2,8,8]{2,1,0} parameter(0)
  %param_1.11 = s32[] parameter(1)
  %constant.35 = s32[] constant(0)
  %dynamic_slice.8 = f32[1,8,8]{2,1,0} dynamic-slice(%param_0.7, %param_1.11, %constant.35, %constant.35), dynamic_slice_sizes={1,8,8}
  ROOT %bitcast.9 = f32[8,8]{1,0} bitcast(%dynamic_slice.8)
}
%wrapped_add_computation (param_0.11: s32[], param_1.15: s32[]) -> s32[] {
  %param_0.11 = s32[] parameter(0)
  %param_1.15 = s32[] parameter(1)
  ROOT %add.18 = s32[] add(%param_0.11, %param_1.15)
}
%wrapped_dynamic-slice_computation (param_0.12: f32[2,4,32,8], param_1.16: s32[], param_2.13: s32[]) -> f32[1,4,32,8] {
  %param_0.12 = f32[2,4,32,8]{3,2,1,0} parameter(0)
  %param_1.16 = s32[] parameter(1)
  %param_2.13 = s32[] parameter(2)
  ROOT %dynamic_slice.9 = f32[1,4,32,8]{3,2,1,0} dynamic-slice(%param_0.12, %param_1.16, %param_2.13, %param_2.13, %param_2.13), dynamic_slice_sizes={1,4,32,8}, metadata={op_name="jit(_scan)/while/body/dynamic_slice" source_file="decode.py" source_line=40}
}
%wide.region_0.5.clone (wide.arg_tuple.2: (s32[], f32[4,8], f32[2,4,32,8], f32[2,4,32,8], s32[])) -> (s32[], f32[4,8], f32[2,4,32,8], f32[2,4,32,8], s32[]) {
  %wide.arg_tuple.2 = (s32[], f32[4,8]{1,0}, f32[2,4,32,8]{3,2,1,0}, f32[2,4,32,8]{3,2,1,0}, s32[]) parameter(0)
  %constant.27 = s32[] constant(1)
  %constant.28 = s32[] constant(0)
  %constant.29 = f32[2,8,8]{2,1,0} constant({...})
  %get-tuple-element.61 = s32[] get-tuple-element(%wide.arg_tuple.2), index=4
  %get-tuple-element.60 = f32[2,4,32,8]{3,2,1,0} get-tuple-element(%wide.arg_tuple.2), index=3
  %get-tuple-element.54 = f32[2,4,32,8]{3,2,1,0} get-tuple-element(%wide.arg_tuple.2), index=2
  %get-tuple-element.53 = f32[4,8]{1,0} get-tuple-element(%wide.arg_tuple.2), index=1
  %get-tuple-element.52 = s32[] get-tuple-element(%wide.arg_tuple.2), index=0
  %copy.5 = s32[] copy(%get-tuple-element.52)
  %dynamic-slice_bitcast_fusion = f32[8,8]{1,0} fusion(%constant.29, %copy.5), kind=kLoop, calls=%fused_computation.4
  %wrapped_add = s32[] fusion(%copy.5, %constant.27), kind=kLoop, calls=%wrapped_add_computation
  %wrapped_dynamic-slice = f32[1,4,32,8]{3,2,1,0} fusion(%get-tuple-element.60, %copy.5, %constant.28), kind=kLoop, calls=%wrapped_dynamic-slice_computation
  %ynn_fusion = f32[4,8]{1,0} fusion(%get-tuple-element.53, %dynamic-slice_bitcast_fusion), kind=kCustom, calls=%fused_computation
  %copy.15 = f32[1,4,32,8]{3,2,1,0} copy(%wrapped_dynamic-slice)
  %bitcast_dynamic-update-slice_fusion.1 = f32[4,32,8]{2,1,0} fusion(%get-tuple-element.61, %ynn_fusion, %copy.15), kind=kLoop, calls=%fused_computation.3
  %tanh_add_fusion = f32[4,8]{1,0} fusion(%get-tuple-element.53, %ynn_fusion, %bitcast_dynamic-update-slice_fusion.1), kind=kLoop, calls=%fused_computation.2
  %bitcast_dynamic-update-slice_fusion = f32[2,4,32,8]{3,2,1,0} fusion(%get-tuple-element.54, %copy.5, %bitcast_dynamic-update-slice_fusion.1), kind=kLoop, calls=%fused_computation.1
  ROOT %tuple.13 = (s32[], f32[4,8]{1,0}, f32[2,4,32,8]{3,2,1,0}, f32[2,4,32,8]{3,2,1,0}, s32[]) tuple(%wrapped_add, %tanh_add_fusion, %bitcast_dynamic-update-slice_fusion, %get-tuple-element.60, %get-tuple-element.61)
}
%wrapped_compare_computation (param_0.13: s32[], param_1.17: s32[]) -> pred[] {
  %param_0.13 = s32[] parameter(0)
  %param_1.17 = s32[] parameter(1)
  ROOT %lt.8 = pred[] compare(%param_0.13, %param_1.17), direction=LT
}
%wide.region_1.6.clone (wide.arg_tuple.0: (s32[], f32[4,8], f32[2,4,32,8], f32[2,4,32,8], s32[])) -> pred[] {
  %wide.arg_tuple.0 = (s32[], f32[4,8]{1,0}, f32[2,4,32,8]{3,2,1,0}, f32[2,4,32,8]{3,2,1,0}, s32[]) parameter(0)
  %constant.26 = s32[] constant(2)
  %get-tuple-element.32 = s32[] get-tuple-element(%wide.arg_tuple.0), index=0
  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.32, %constant.26), kind=kLoop, calls=%wrapped_compare_computation
}
%fused_computation.5 (param_0.9: s32[]) -> s32[] {
  %param_0.9 = s32[] parameter(0)
  %constant.37 = s32[] constant(0)
  %lt.7 = pred[] compare(%param_0.9, %constant.37), direction=LT
  %constant.36 = s32[] constant(32)
  %add.17 = s32[] add(%param_0.9, %constant.36)
  ROOT %select_n.4 = s32[] select(%lt.7, %add.17, %param_0.9)
}
%wrapped_broadcast_computation (param_0.10: f32[]) -> f32[2,4,32,8] {
  %param_0.10 = f32[] parameter(0)
  ROOT %broadcast_in_dim.9 = f32[2,4,32,8]{3,2,1,0} broadcast(%param_0.10), dimensions={}
}
ENTRY %main.7 (cache.1: f32[2,4,32,8], x.1: f32[4,8], t.1: s32[]) -> (f32[2,4,32,8], f32[4,8]) {
  %cache.1 = f32[2,4,32,8]{3,2,1,0} parameter(0)
  %x.1 = f32[4,8]{1,0} parameter(1)
  %t.1 = s32[] parameter(2)
  %constant.18 = s32[] constant(0)
  %constant.19 = f32[] constant(0)
  %copy.13 = f32[4,8]{1,0} copy(%x.1)
  %add_select_fusion = s32[] fusion(%t.1), kind=kLoop, calls=%fused_computation.5
  %copy.14 = s32[] copy(%constant.18)
  %wrapped_broadcast = f32[2,4,32,8]{3,2,1,0} fusion(%constant.19), kind=kLoop, calls=%wrapped_broadcast_computation
  %tuple.11 = (s32[], f32[4,8]{1,0}, f32[2,4,32,8]{3,2,1,0}, f32[2,4,32,8]{3,2,1,0}, s32[]) tuple(%copy.14, %copy.13, %wrapped_broadcast, %cache.1, %add_select_fusion)
  %while.1 = (s32[], f32[4,8]{1,0}, f32[2,4,32,8]{3,2,1,0}, f32[2,4,32,8]{3,2,1,0}, s32[]) while(%tuple.11), condition=%wide.region_1.6.clone, body=%wide.region_0.5.clone, metadata={op_name="jit(_scan)/while" source_file="decode.py" source_line=40}
  %get-tuple-element.62 = f32[2,4,32,8]{3,2,1,0} get-tuple-element(%while.1), index=2
  %get-tuple-element.63 = f32[4,8]{1,0} get-tuple-element(%while.1), index=1
  %copy.12 = f32[2,4,32,8]{3,2,1,0} copy(%get-tuple-element.62)
  ROOT %tuple.14 = (f32[2,4,32,8]{3,2,1,0}, f32[4,8]{1,0}) tuple(%copy.12, %get-tuple-element.63)
}
"""

# The same scan whose ys are computed per layer (a broadcast of the carry), not read from an input stack.
_COMPUTED = _RESTACKED.replace(
    "%copy.15 = f32[1,4,32,8]{3,2,1,0} copy(%wrapped_dynamic-slice)",
    "%copy.15 = f32[1,4,32,8]{3,2,1,0} broadcast(%get-tuple-element.53), dimensions={1,3}")

# The layer written back into the stack it was read from (a carried stack, updated where it lies).
_CARRIED = _RESTACKED.replace(
    "fusion(%get-tuple-element.54, %copy.5, %bitcast_dynamic-update-slice_fusion.1)",
    "fusion(%get-tuple-element.60, %copy.5, %bitcast_dynamic-update-slice_fusion.1)").replace(
    "tuple(%wrapped_add, %tanh_add_fusion, %bitcast_dynamic-update-slice_fusion, %get-tuple-element.60,",
    "tuple(%wrapped_add, %tanh_add_fusion, %get-tuple-element.54, %bitcast_dynamic-update-slice_fusion,")

# A shift, not a re-stack: the layer read at the loop's index written at the next one (what
# ``fori_loop`` with ``ys.at[i].set(xs[(i + 1) % n])`` compiles to): no update in place writes that.
_SHIFTED = _RESTACKED.replace(
    "fusion(%get-tuple-element.54, %copy.5, %bitcast_dynamic-update-slice_fusion.1)",
    "fusion(%get-tuple-element.54, %wrapped_add, %bitcast_dynamic-update-slice_fusion.1)")


class ScanStateRestacked(Rule):
    """Per-layer state (a KV cache) that a scan over stacked layers takes as xs and returns as ys.

    What it flags:
        A ``while`` loop (``jax.lax.scan``, flax's ``nn.scan``) over stacked layers whose state holds
        two stacks of the same shape: an input stack passed through unchanged, and an output stack
        into which each iteration writes one whole layer (a ``dynamic-update-slice`` of the layer at
        the loop's index) that it sliced out of the input stack at the same index (``dynamic-slice``),
        copied and updated in part (the new position). The output stack is filled before the loop
        (a ``broadcast``) and often copied after it into the donated buffer. One finding per such state,
        at the scan's line, with the line of the update of the position. Only optimized modules are
        read. With op stats, the time is what carrying the stack removes: the slice, the copy, the
        write of the whole layer, the fill and the copy after the loop (the write of the position
        stays), counted as the union of those ops' intervals on XLA:CPU (their sum elsewhere).
    Why it costs:
        Each step reads and writes every layer's whole state, and fills a second stack of its size,
        where one position per layer changes: a decode step moves the whole KV cache several times.
    Example:
        ``x, cache = jax.lax.scan(layer, x, (weights, cache))`` with ``layer`` returning
        ``dynamic_update_slice(layer_cache, row, (0, t, 0))`` as its y.
    Fix:
        Carry the stacked cache in the scan's carry and update it in place with one
        ``jax.lax.dynamic_update_slice`` at (layer, position), reading each layer's slice from it
        (or unroll the layers and update the stacked cache once per layer); donate the cache
        (``donate_argnums``) so that the update reuses the caller's buffer.
    """

    code = "HD020"
    name = "loop.scan-state-restacked"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = ""

    VALID = (
        Example(hlo=(_COMPUTED,), note="decode.py: ys computed per layer, not read from an input stack"),
        Example(hlo=(_CARRIED,), note="decode.py: each layer written back into the stack it was read from"),
        Example(hlo=(_SHIFTED,), note="decode.py: the layer read at the loop's index written at the next one"),
    )
    INVALID = (
        Example(hlo=(_RESTACKED,), expect=("HD020 bitcast_dynamic-update-slice_fusion",),
                note="decode.py: the cache as the scan's xs and ys"),
        Example(
            hlo=(_RESTACKED,),
            opstats=({"module": "jit__scan", "op": "bitcast_dynamic-update-slice_fusion", "occurrences": 8,
                      "time_per_step_us": 40.0, "category": "data-movement"},
                     {"module": "jit__scan", "op": "wrapped_dynamic-slice", "occurrences": 8,
                      "time_per_step_us": 30.0, "category": "data-movement"},
                     {"module": "jit__scan", "op": "copy.15", "occurrences": 8, "time_per_step_us": 10.0,
                      "category": "copy"},
                     {"module": "jit__scan", "op": "wrapped_broadcast", "occurrences": 4,
                      "time_per_step_us": 20.0, "category": "data-movement"},
                     {"module": "jit__scan", "op": "while.1", "occurrences": 4, "time_per_step_us": 150.0}),
            step_time_us=200.0, num_steps=4, expect=("HD020 bitcast_dynamic-update-slice_fusion",),
            note="with op stats: 2 layers per step, 100 us of 200 in the slice, copy, write and fill",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            if not stage_of(m, ctx.origin).optimized:
                continue  # XLA's passes decide what is written where
            for state in restacked_states(m):
                yield self._finding(ctx, m, state)

    def _finding(self, ctx: Context, m: HloModule, s: RestackedState) -> Finding:
        update = s.updates[0] if s.updates else None
        frame = update.frame if update is not None else None
        update_line = shown_source(frame.file, frame.line) if frame is not None and frame.file else ""
        layers = s.stack.dims[0]
        message = (f"{s.writer.name} writes each layer of {dtype_shape(s.stack)} ({fmt_bytes(s.stack.nbytes)}) "
                   f"whole into a new stack (element {s.output_index} of {s.loop.name}), after slicing it out "
                   f"of the input stack (element {s.input_index}, {s.read.name})"
                   + (f" and updating {fmt_bytes(update_bytes(m, update))} of it at {update_line}"
                      if update is not None and update_line else "")
                   + f": {layers} layers of {fmt_bytes(s.layer_bytes)} read, copied and written per call"
                   + (f", and the new stack filled before the loop ({s.fill.name})" if s.fill is not None else ""))
        removed = [op.name for op in s.removed]
        timings = {name: t for name in removed if (t := ctx.op_timing(m, name)) is not None}
        summed = sum(t.time_per_step_us for t in timings.values())
        ratio = overlap_ratio(ctx, m.name, list(timings)) if timings else None
        time = summed * ratio if ratio is not None else summed
        if timings:
            message += f"; {len(timings)} ops, {time / 1000:.2f} ms per step that carrying the stack removes"
        message += ("; carry the stacked state in the scan's carry and update it in place (one "
                    "dynamic_update_slice at layer and position), and donate it")
        return ctx.finding(
            self, m, s.writer, message, source_inst=s.loop,
            parts=bounded(ctx, op=time, op_bound=summed) if timings else None,
            evidence=(s.writer.raw, s.read.raw, s.loop.raw),
            extra=(("loop", s.loop.name), ("input_index", s.input_index), ("output_index", s.output_index),
                   ("update_source", update_line), ("fill", s.fill.name if s.fill is not None else ""),
                   ("ops", tuple(removed)), ("timed_ops", tuple(timings)),
                   ("summed_op_us_per_step", round(summed, 1))
                   ) + ((("overlap_ratio", round(ratio, 3)),) if ratio is not None else ()),
        )

