"""HD022: a prefill computed over every padded position, which the decode loop then computes again."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloInstruction, HloModule, fused_opcodes
from hlo_doctor.hlo.analysis import dtype_shape
from hlo_doctor.hlo.loops import CarriedFlow, carried_flows
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_duration, stage_of

# XLA:CPU (jax 0.10.2) compiling ``prefill.py`` (metadata left out): ``generate`` embeds all 64
# positions of the padded tokens, runs a causal attention over them ([64, 64] scores) and seeds a
# [64, 16] cache with the result, then a ``fori_loop(start, 64, ...)`` writes one position of the cache
# per iteration (``dynamic_update_slice`` at the counter): every position from ``start`` on is
# computed again.
_PADDED = """\
HloModule jit_generate, is_scheduled=true, entry_computation_layout={(s32[64]{0}, f32[32,16]{1,0}, f32[16,16]{1,0}, s32[])->f32[64,16]{1,0}}, allow_spmd_sharding_propagation_to_parameters={true,true,true,true}, allow_spmd_sharding_propagation_to_output={true}
%fused_computation.3 (param_0.3: f32[64,16], param_1.5: s32[], param_2.3: f32[1,16]) -> f32[64,16] {
  %param_0.3 = f32[64,16]{1,0} parameter(0)
  %param_2.3 = f32[1,16]{1,0} parameter(2)
  %bitcast.7 = f32[16]{0} bitcast(%param_2.3)
  %tanh.5 = f32[16]{0} tanh(%bitcast.7)
  %bitcast.6 = f32[1,16]{1,0} bitcast(%tanh.5)
  %param_1.5 = s32[] parameter(1)
  %constant.33 = s32[] constant(0)
  %lt.17 = pred[] compare(%param_1.5, %constant.33), direction=LT
  %constant.32 = s32[] constant(64)
  %add.26 = s32[] add(%param_1.5, %constant.32)
  %select_n.15 = s32[] select(%lt.17, %add.26, %param_1.5)
  ROOT %dynamic_update_slice.5 = f32[64,16]{1,0} dynamic-update-slice(%param_0.3, %bitcast.6, %select_n.15, %constant.33)
}
%fused_computation.4 (param_0.6: f32[64,16], param_1.9: s32[]) -> f32[16,1] {
  %param_0.6 = f32[64,16]{1,0} parameter(0)
  %param_1.9 = s32[] parameter(1)
  %constant.8.clone.8 = s32[] constant(-1)
  %add.28 = s32[] add(%param_1.9, %constant.8.clone.8)
  %constant.34 = s32[] constant(0)
  %lt.18 = pred[] compare(%add.28, %constant.34), direction=LT
  %constant.27.clone.4 = s32[] constant(63)
  %add.27 = s32[] add(%param_1.9, %constant.27.clone.4)
  %select_n.16 = s32[] select(%lt.18, %add.27, %add.28)
  %dynamic_slice.5 = f32[1,16]{1,0} dynamic-slice(%param_0.6, %select_n.16, %constant.34), dynamic_slice_sizes={1,16}
  %bitcast.9 = f32[16]{0} bitcast(%dynamic_slice.5)
  ROOT %bitcast.8 = f32[16,1]{1,0} bitcast(%bitcast.9)
}
%wrapped_add_computation (param_0.11: s32[], param_1.16: s32[]) -> s32[] {
  %param_0.11 = s32[] parameter(0)
  %param_1.16 = s32[] parameter(1)
  ROOT %add.31 = s32[] add(%param_0.11, %param_1.16)
}
%wide.wide.region_0.3.clone.clone (wide.wide.arg_tuple.5: (s32[], f32[64,16], f32[16,16])) -> (s32[], f32[64,16], f32[16,16]) {
  %wide.wide.arg_tuple.5 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) parameter(0)
  %constant.29 = s32[] constant(1)
  %get-tuple-element.62 = f32[16,16]{1,0} get-tuple-element(%wide.wide.arg_tuple.5), index=2
  %get-tuple-element.58 = f32[64,16]{1,0} get-tuple-element(%wide.wide.arg_tuple.5), index=1
  %get-tuple-element.57 = s32[] get-tuple-element(%wide.wide.arg_tuple.5), index=0
  %copy.3 = s32[] copy(%get-tuple-element.57)
  %bitcast_bitcast_fusion = f32[16,1]{1,0} fusion(%get-tuple-element.58, %copy.3), kind=kLoop, calls=%fused_computation.4
  %wrapped_add = s32[] fusion(%copy.3, %constant.29), kind=kLoop, calls=%wrapped_add_computation
  %dot = f32[1,16]{1,0} dot(%bitcast_bitcast_fusion, %get-tuple-element.62), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %select_dynamic-update-slice_fusion = f32[64,16]{1,0} fusion(%get-tuple-element.58, %copy.3, %dot), kind=kLoop, calls=%fused_computation.3
  ROOT %tuple.17 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) tuple(%wrapped_add, %select_dynamic-update-slice_fusion, %get-tuple-element.62)
}
%wrapped_compare_computation (param_0.12: s32[], param_1.17: s32[]) -> pred[] {
  %param_0.12 = s32[] parameter(0)
  %param_1.17 = s32[] parameter(1)
  ROOT %lt.21 = pred[] compare(%param_0.12, %param_1.17), direction=LT
}
%wide.wide.region_1.4.clone.clone (wide.wide.arg_tuple.4: (s32[], f32[64,16], f32[16,16])) -> pred[] {
  %wide.wide.arg_tuple.4 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) parameter(0)
  %constant.28 = s32[] constant(64)
  %get-tuple-element.46 = s32[] get-tuple-element(%wide.wide.arg_tuple.4), index=0
  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.46, %constant.28), kind=kLoop, calls=%wrapped_compare_computation
}
%fused_computation (param_0: f32[64,64], param_1: f32[64,16]) -> f32[64,16] {
  %param_0 = f32[64,64]{1,0} parameter(0)
  %param_1 = f32[64,16]{1,0} parameter(1)
  ROOT %dot_general.8 = f32[64,16]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%fused_computation.1 (param_0.1: f32[64,16], param_1.1: f32[64,16]) -> f32[64,64] {
  %param_0.1 = f32[64,16]{1,0} parameter(0)
  %param_1.1 = f32[64,16]{1,0} parameter(1)
  ROOT %dot_general.9 = f32[64,64]{1,0} dot(%param_0.1, %param_1.1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}
%fused_computation.2 (param_0.2: f32[64,16], param_1.2: f32[16,16]) -> f32[64,16] {
  %param_0.2 = f32[64,16]{1,0} parameter(0)
  %param_1.2 = f32[16,16]{1,0} parameter(1)
  ROOT %dot_general.10 = f32[64,16]{1,0} dot(%param_0.2, %param_1.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%fused_computation.5 (param_0.8: f32[64,64]) -> f32[64,64] {
  %iota.11 = s32[64,64]{1,0} iota(), iota_dimension=0
  %iota.10 = s32[64,64]{1,0} iota(), iota_dimension=1
  %ge.2 = pred[64,64]{1,0} compare(%iota.11, %iota.10), direction=GE
  %param_0.8 = f32[64,64]{1,0} parameter(0)
  %constant.35 = f32[] constant(0)
  %broadcast_in_dim.11 = f32[64,64]{1,0} broadcast(%constant.35), dimensions={}
  ROOT %select_n.17 = f32[64,64]{1,0} select(%ge.2, %param_0.8, %broadcast_in_dim.11)
}
%fused_computation.6 (param_0.10: f32[32,16], param_1.15: s32[64]) -> f32[64,16] {
  %param_0.10 = f32[32,16]{1,0} parameter(0)
  %param_1.15 = s32[64]{0} parameter(1)
  %constant.37 = s32[] constant(0)
  %lt.20 = s32[64]{0} broadcast(%constant.37), dimensions={}
  %lt.19 = pred[64]{0} compare(%param_1.15, %lt.20), direction=LT
  %constant.36 = s32[] constant(32)
  %add.30 = s32[64]{0} broadcast(%constant.36), dimensions={}
  %add.29 = s32[64]{0} add(%param_1.15, %add.30)
  %select_n.18 = s32[64]{0} select(%lt.19, %add.29, %param_1.15)
  %bitcast.11 = s32[64,1]{1,0} bitcast(%select_n.18)
  %gather.2 = f32[64,1,16]{2,1,0} gather(%param_0.10, %bitcast.11), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16}
  ROOT %bitcast.10 = f32[64,16]{1,0} bitcast(%gather.2)
}
ENTRY %main.5 (tokens.1: s32[64], emb.1: f32[32,16], w.1: f32[16,16], start.1: s32[]) -> f32[64,16] {
  %tokens.1 = s32[64]{0} parameter(0)
  %emb.1 = f32[32,16]{1,0} parameter(1)
  %w.1 = f32[16,16]{1,0} parameter(2)
  %start.1 = s32[] parameter(3)
  %gather_bitcast_fusion = f32[64,16]{1,0} fusion(%emb.1, %tokens.1), kind=kLoop, calls=%fused_computation.6
  %copy.7 = s32[] copy(%start.1)
  %ynn_fusion.2 = f32[64,16]{1,0} fusion(%gather_bitcast_fusion, %w.1), kind=kCustom, calls=%fused_computation.2
  %ynn_fusion.1 = f32[64,64]{1,0} fusion(%ynn_fusion.2, %gather_bitcast_fusion), kind=kCustom, calls=%fused_computation.1
  %broadcast_select_fusion = f32[64,64]{1,0} fusion(%ynn_fusion.1), kind=kLoop, calls=%fused_computation.5
  %ynn_fusion = f32[64,16]{1,0} fusion(%broadcast_select_fusion, %gather_bitcast_fusion), kind=kCustom, calls=%fused_computation
  %tuple.15 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) tuple(%copy.7, %ynn_fusion, %w.1)
  %while.3 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) while(%tuple.15), condition=%wide.wide.region_1.4.clone.clone, body=%wide.wide.region_0.3.clone.clone
  ROOT %while.7 = f32[64,16]{1,0} get-tuple-element(%while.3), index=1
}
"""

# The same program seeding the cache with zeros (``generate_prompt_only``): no prefill to waste.
_NO_PREFILL = """\
HloModule jit_generate_prompt_only, is_scheduled=true, entry_computation_layout={(f32[16,16]{1,0}, s32[])->f32[64,16]{1,0}}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true}
%fused_computation (param_0: f32[64,16], param_1.2: s32[], param_2.3: f32[1,16]) -> f32[64,16] {
  %param_0 = f32[64,16]{1,0} parameter(0)
  %param_2.3 = f32[1,16]{1,0} parameter(2)
  %bitcast.5 = f32[16]{0} bitcast(%param_2.3)
  %tanh.5 = f32[16]{0} tanh(%bitcast.5)
  %bitcast.4 = f32[1,16]{1,0} bitcast(%tanh.5)
  %param_1.2 = s32[] parameter(1)
  %constant.28 = s32[] constant(0)
  %lt.15 = pred[] compare(%param_1.2, %constant.28), direction=LT
  %constant.27 = s32[] constant(64)
  %add.24 = s32[] add(%param_1.2, %constant.27)
  %select_n.10 = s32[] select(%lt.15, %add.24, %param_1.2)
  ROOT %dynamic_update_slice.5 = f32[64,16]{1,0} dynamic-update-slice(%param_0, %bitcast.4, %select_n.10, %constant.28)
}
%fused_computation.1 (param_0.3: f32[64,16], param_1.6: s32[]) -> f32[16,1] {
  %param_0.3 = f32[64,16]{1,0} parameter(0)
  %param_1.6 = s32[] parameter(1)
  %constant.11.clone.8 = s32[] constant(-1)
  %add.26 = s32[] add(%param_1.6, %constant.11.clone.8)
  %constant.29 = s32[] constant(0)
  %lt.16 = pred[] compare(%add.26, %constant.29), direction=LT
  %constant.22.clone.4 = s32[] constant(63)
  %add.25 = s32[] add(%param_1.6, %constant.22.clone.4)
  %select_n.11 = s32[] select(%lt.16, %add.25, %add.26)
  %dynamic_slice.5 = f32[1,16]{1,0} dynamic-slice(%param_0.3, %select_n.11, %constant.29), dynamic_slice_sizes={1,16}
  %bitcast.7 = f32[16]{0} bitcast(%dynamic_slice.5)
  ROOT %bitcast.6 = f32[16,1]{1,0} bitcast(%bitcast.7)
}
%wrapped_add_computation (param_0.5: s32[], param_1.7: s32[]) -> s32[] {
  %param_0.5 = s32[] parameter(0)
  %param_1.7 = s32[] parameter(1)
  ROOT %add.27 = s32[] add(%param_0.5, %param_1.7)
}
%wide.wide.region_0.1.clone.clone (wide.wide.arg_tuple.5: (s32[], f32[64,16], f32[16,16])) -> (s32[], f32[64,16], f32[16,16]) {
  %wide.wide.arg_tuple.5 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) parameter(0)
  %constant.24 = s32[] constant(1)
  %get-tuple-element.62 = f32[16,16]{1,0} get-tuple-element(%wide.wide.arg_tuple.5), index=2
  %get-tuple-element.58 = f32[64,16]{1,0} get-tuple-element(%wide.wide.arg_tuple.5), index=1
  %get-tuple-element.57 = s32[] get-tuple-element(%wide.wide.arg_tuple.5), index=0
  %copy.3 = s32[] copy(%get-tuple-element.57)
  %bitcast_bitcast_fusion = f32[16,1]{1,0} fusion(%get-tuple-element.58, %copy.3), kind=kLoop, calls=%fused_computation.1
  %wrapped_add = s32[] fusion(%copy.3, %constant.24), kind=kLoop, calls=%wrapped_add_computation
  %dot = f32[1,16]{1,0} dot(%bitcast_bitcast_fusion, %get-tuple-element.62), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %select_dynamic-update-slice_fusion = f32[64,16]{1,0} fusion(%get-tuple-element.58, %copy.3, %dot), kind=kLoop, calls=%fused_computation
  ROOT %tuple.17 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) tuple(%wrapped_add, %select_dynamic-update-slice_fusion, %get-tuple-element.62)
}
%wrapped_compare_computation (param_0.6: s32[], param_1.8: s32[]) -> pred[] {
  %param_0.6 = s32[] parameter(0)
  %param_1.8 = s32[] parameter(1)
  ROOT %lt.17 = pred[] compare(%param_0.6, %param_1.8), direction=LT
}
%wide.wide.region_1.2.clone.clone (wide.wide.arg_tuple.4: (s32[], f32[64,16], f32[16,16])) -> pred[] {
  %wide.wide.arg_tuple.4 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) parameter(0)
  %constant.23 = s32[] constant(64)
  %get-tuple-element.46 = s32[] get-tuple-element(%wide.wide.arg_tuple.4), index=0
  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.46, %constant.23), kind=kLoop, calls=%wrapped_compare_computation
}
%wrapped_broadcast_computation (param_0.4: f32[]) -> f32[64,16] {
  %param_0.4 = f32[] parameter(0)
  ROOT %broadcast_in_dim.6 = f32[64,16]{1,0} broadcast(%param_0.4), dimensions={}
}
ENTRY %main.3 (w.1: f32[16,16], start.1: s32[]) -> f32[64,16] {
  %w.1 = f32[16,16]{1,0} parameter(0)
  %start.1 = s32[] parameter(1)
  %constant.9 = f32[] constant(0)
  %copy.7 = s32[] copy(%start.1)
  %wrapped_broadcast = f32[64,16]{1,0} fusion(%constant.9), kind=kLoop, calls=%wrapped_broadcast_computation
  %tuple.15 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) tuple(%copy.7, %wrapped_broadcast, %w.1)
  %while.3 = (s32[], f32[64,16]{1,0}, f32[16,16]{1,0}) while(%tuple.15), condition=%wide.wide.region_1.2.clone.clone, body=%wide.wide.region_0.1.clone.clone
  ROOT %while.7 = f32[64,16]{1,0} get-tuple-element(%while.3), index=1
}
"""


def _positions(flow: CarriedFlow) -> int:
    """S: the length of the dimension of the carried element the body writes one slab of per
    iteration (the element's bytes over the bytes that differ), or 0 when no dimension, or more than
    one, is that long."""
    if flow.bytes_differ <= 0 or flow.element.nbytes % flow.bytes_differ:
        return 0
    s = flow.element.nbytes // flow.bytes_differ
    # S twice among the buffer's dimensions (positions and a head width of 32): which an op's S-long
    # dimension runs over cannot be told from shapes.
    return s if s > 1 and flow.element.dims.count(s) == 1 else 0


def _ancestors(module: HloModule, inst: HloInstruction) -> list[HloInstruction]:
    """The ops of ``inst``'s computation that ``inst`` is computed from (itself included) that read
    more than constants."""
    seen: dict[str, HloInstruction] = {}
    todo = [inst]
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        for name in op.operands:
            src = module.instruction(name, op.computation)
            if src is not None and src.opcode != "parameter":
                todo.append(src)
    # A buffer of constants (a cache of zeros) is no prefill: only ops reading something computed.
    return [op for op in seen.values()
            if any((src := module.instruction(n, op.computation)) is not None and src.opcode != "constant"
                   for n in op.operands)]


# What only moves or fills data: a copy of an input, a gather of embedding rows, a cache of zeros.
_MOVES = frozenset({"copy", "bitcast", "reshape", "transpose", "slice", "dynamic-slice", "dynamic-update-slice",
                    "concatenate", "broadcast", "tuple", "get-tuple-element", "parameter", "constant", "pad",
                    "convert", "gather", "iota"})


def _position_dims(op: HloInstruction, s: int) -> int:
    """How many of ``op``'s dimensions are S long (positions flattened with a batch are not counted:
    S times a count is as often a width)."""
    shape = op.shape.elements[0] if op.shape.is_tuple and op.shape.elements else op.shape
    return sum(1 for d in shape.dims if d == s)


class PrefillOverPadding(Rule):
    """A prefill computed over every padded position of a cache that the decode loop then writes again.

    What it flags:
        A ``while`` whose body writes one position of a loop-carried buffer (a KV cache) per
        iteration, K iterations per step (from the op stats), where the buffer the loop starts from
        is computed, in the same program, by a prefill over all S positions of it: ops with a
        dimension of S, among them an [S, S] product (attention over every position). The K
        positions the loop writes were computed by the prefill too; their values are overwritten,
        and a causal mask keeps the valid positions from reading them. Only ops run once per step
        that compute count (not a cache of zeros, a copy of the tokens, a gather of embedding
        rows); positions flattened with a batch (a dimension of S times B) are not counted, and a
        buffer with two dimensions of S (positions and a head width both 32) is left alone. Only
        optimized modules with op stats are read.
    Why it costs:
        The prefill's work over those positions is thrown away: K / S of its linear work
        (projections, MLPs) and 1 - ((S - K) / S)^2 of its work over [S, S] (attention scores).
        keras-hub's ``generate()`` pads every prompt to the cache length and prefills all of it: a
        768-token prompt in a 1,024-token cache, 12.6% of the step (the what-if measured 10.7%); 64
        tokens, 11.5% (9.6%). The capture cannot see the valid length (a runtime value): K is the
        loop's iterations, so a loop stopped early (a stop token) makes the estimate smaller.
    Example:
        ``cache = prefill(emb[tokens], w)`` over a padded ``tokens[64]``, then
        ``fori_loop(start, 64, body, cache)`` with ``body`` writing ``cache[i]``: 60 of the 64
        positions computed twice with ``start`` 4.
    Fix:
        Prefill only the valid prompt positions (``prefill(tokens[:, :P])`` written into a zero
        cache), with P static per compiled program (bucket prompt lengths), or start the loop at the
        first position and drop the prefill.
    """

    code = "HD022"
    name = "prefill.padded-positions"
    severity = Severity.MEDIUM
    requires = ("hlo", "opstats")
    VALID = (
        Example(hlo=(_NO_PREFILL,), opstats=(
            {"module": "jit_generate_prompt_only", "op": "select_dynamic-update-slice_fusion", "occurrences": 240,
             "time_per_step_us": 60.0},
            {"module": "jit_generate_prompt_only", "op": "wrapped_broadcast", "occurrences": 4,
             "time_per_step_us": 5.0},
            {"module": "jit_generate_prompt_only", "op": "while.3", "occurrences": 4, "time_per_step_us": 90.0}),
            step_time_us=100.0, num_steps=4, note="the cache starts as zeros: no prefill"),
        Example(hlo=(_PADDED,), note="without op stats: the loop's iterations are unknown"),
    )
    INVALID = (
        Example(hlo=(_PADDED,), opstats=(
            {"module": "jit_generate", "op": "select_dynamic-update-slice_fusion", "occurrences": 240,
             "time_per_step_us": 60.0},
            {"module": "jit_generate", "op": "broadcast_select_fusion", "occurrences": 4, "time_per_step_us": 20.0},
            {"module": "jit_generate", "op": "ynn_fusion.1", "occurrences": 4, "time_per_step_us": 20.0},
            {"module": "jit_generate", "op": "ynn_fusion.2", "occurrences": 4, "time_per_step_us": 8.0},
            {"module": "jit_generate", "op": "while.3", "occurrences": 4, "time_per_step_us": 90.0}),
            step_time_us=200.0, num_steps=4, expect=("HD022 broadcast_select_fusion",),
            note="60 of 64 positions computed again by the loop: 40 us of [64, 64] work x 0.996, 8 x 0.94"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        if not ctx.num_steps:
            return
        for m in ctx.modules:
            if not stage_of(m, ctx.origin).optimized:
                continue
            for loop in m.instructions():
                if loop.opcode == "while":
                    found = self._loop(ctx, m, loop)
                    if found is not None:
                        yield found

    def _loop(self, ctx: Context, m: HloModule, loop: HloInstruction) -> Finding | None:
        init = m.instruction(loop.operands[0], loop.computation) if loop.operands else None
        if init is None or init.opcode != "tuple":
            return None
        best: tuple[float, Finding] | None = None
        # Per run of the loop (a program called twice per step runs its prefill and its loop twice).
        own = ctx.op_timing(m, loop.name)
        calls = max(1.0, round(own.occurrences_per_device / ctx.num_steps)) if own is not None else 1.0
        for flow in carried_flows(m, loop):
            s = _positions(flow)
            k = round(self._iterations(ctx, m, flow) / calls)
            if not s or not 0 < k < s or flow.index >= len(init.operands):
                continue
            seed = m.instruction(init.operands[flow.index], loop.computation)
            if seed is None:
                continue
            ops = []
            for op in _ancestors(m, seed):
                n = _position_dims(op, s)
                if set(fused_opcodes(m, op)) <= _MOVES:
                    continue  # moves data: the cache's zeros, the tokens' copy, the embedding's rows
                timing = ctx.op_timing(m, op.name)
                if not n or timing is None or not timing.time_per_step_us:
                    continue
                runs = timing.occurrences_per_device / ctx.num_steps / calls
                if runs > 1.5:
                    continue  # inside another loop: not a prefill run once per step
                frac = k / s if n == 1 else 1.0 - ((s - k) / s) ** 2
                ops.append((timing.time_per_step_us * frac, timing.time_per_step_us, op))
            if not any(n >= 2 for n in (_position_dims(op, s) for _, _, op in ops)):
                continue  # no [S, S] work (attention over every position): a prefill over S is not shown
            waste = sum(w for w, _, _ in ops)
            if ops and (best is None or waste > best[0]):
                best = (waste, self._finding(ctx, m, loop, flow, s, k, ops))
        return best[1] if best is not None else None

    @staticmethod
    def _iterations(ctx: Context, m: HloModule, flow: CarriedFlow) -> float:
        """Executions per step of the body's busiest op on the way to the carried element."""
        runs = [t.occurrences_per_device / ctx.num_steps
                for t in (ctx.op_timing(m, op.name) for op in flow.chain) if t is not None]
        return max(runs) if runs else 0.0

    def _finding(self, ctx: Context, m: HloModule, loop: HloInstruction, flow: CarriedFlow, s: int, k: float,
                 ops: list[tuple[float, float, HloInstruction]]) -> Finding:
        ops.sort(key=lambda x: -x[0])
        waste = sum(w for w, _, _ in ops)
        total = sum(t for _, t, _ in ops)
        top = ops[0][2]
        message = (f"the prefill seeding loop-carried element {flow.index} of {loop.name} "
                   f"({dtype_shape(flow.element)}) computes all {s} positions, and the loop writes {k:.0f} of them "
                   f"again ({k:.0f} iterations per step, one position each): {len(ops)} ops over the positions, "
                   f"{fmt_duration(total)} per step, of which ~{fmt_duration(waste)} on the positions the loop overwrites "
                   f"(their linear work x {k / s:.2f}, their [S, S] work x {1 - ((s - k) / s) ** 2:.2f}); "
                   f"prefill only the valid prompt positions")
        return ctx.finding(
            self, m, top, message, recoverable_us=waste, evidence=(top.raw, loop.raw),
            extra=(("loop", loop.name), ("tuple_index", flow.index), ("positions", s),
                   ("iterations_per_step", k), ("ops", tuple(op.name for _, _, op in ops)), ("ops_us", total)),
        )
