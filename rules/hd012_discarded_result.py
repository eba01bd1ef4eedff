"""HD012: a matmul result computed whole and then sliced to a small part before any other use."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloInstruction, HloModule
from hlo_doctor.hlo.analysis import callers, dtype_shape, key_instruction
from hlo_doctor.hlo.origin import origin_of
from hlo_doctor.hlo.result_slices import PartialRead, is_matmul_op, partial_read
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes, stage_of

THRESHOLD = 0.5
"""Flag a result only when its uses keep less than this fraction of it."""
MIN_DISCARDED_BYTES = 64 * 1024
"""Below this a discarded part is noise (a test's matmul), not a finding."""
_LEVEL_CALLERS = frozenset({"while", "conditional", "call"})

# transformers 4.57.6 Flax Gemma, greedy generate (vocab 256000, 16 prompt positions, XLA:CPU): the LM
# head over every prompt position and the argmax of the last one (``logits[:, -1]``, the slice fused
# into the argmax), cut from the optimized module (runs/field/hlo/tf-gemma-jit-v256k-s32,
# module_0204): the computations involved and the entry's lines as printed; the LM head's input
# (multiply_bitcast_fusion) is an entry parameter, stacks kept 4 frames deep.
_LM_HEAD_EVERY_POSITION = r"""HloModule jit_generate, is_scheduled=true, entry_computation_layout={(f32[16,128]{1,0}, f32[256000,128]{1,0})->s32[1]{0}}
FileNames
7 "/work/main/benchmarks/field/transformers_flax.py"
8 "/work/fieldvenv/lib/python3.11/site-packages/transformers/generation/flax_utils.py"
9 "/work/fieldvenv/lib/python3.11/site-packages/transformers/models/gemma/modeling_flax_gemma.py"
11 "/work/fieldvenv/lib/python3.11/site-packages/flax/linen/linear.py"
FunctionNames
15 "_make.<locals>.generate"
16 "FlaxGenerationMixin.generate"
17 "FlaxGenerationMixin._greedy_search"
18 "FlaxGenerationMixin._greedy_search.<locals>.greedy_search_body_fn"
19 "FlaxGemmaPreTrainedModel.__call__"
20 "FlaxGemmaForCausalLMModule.__call__"
31 "Dense.__call__"
FileLocations
15 {file_name_id=7 function_name_id=15 line=142 end_line=142 column=15 end_column=52}
16 {file_name_id=8 function_name_id=16 line=428 end_line=437 column=19 end_column=13}
17 {file_name_id=8 function_name_id=17 line=652 end_line=652 column=20 end_column=48}
18 {file_name_id=8 function_name_id=18 line=628 end_line=628 column=28 end_column=91}
19 {file_name_id=9 function_name_id=19 line=527 end_line=539 column=18 end_column=9}
30 {file_name_id=8 function_name_id=18 line=634 end_line=634 column=25 end_column=52}
47 {file_name_id=11 function_name_id=31 line=287 end_line=292 column=8 end_column=5}
96 {file_name_id=9 function_name_id=20 line=721 end_line=721 column=24 end_column=96}
97 {file_name_id=8 function_name_id=18 line=629 end_line=629 column=21 end_column=48}
StackFrames
15 {file_location_id=15 parent_frame_id=15}
16 {file_location_id=16 parent_frame_id=16}
17 {file_location_id=17 parent_frame_id=17}
18 {file_location_id=18 parent_frame_id=18}
19 {file_location_id=19 parent_frame_id=19}
36 {file_location_id=15 parent_frame_id=36}
37 {file_location_id=16 parent_frame_id=37}
38 {file_location_id=17 parent_frame_id=38}
39 {file_location_id=30 parent_frame_id=39}
268 {file_location_id=96 parent_frame_id=20}
269 {file_location_id=47 parent_frame_id=269}
270 {file_location_id=97 parent_frame_id=18}
287 {file_location_id=15 parent_frame_id=278}
288 {file_location_id=16 parent_frame_id=288}
289 {file_location_id=17 parent_frame_id=289}
290 {file_location_id=30 parent_frame_id=290}
%fused_computation (param_0: f32[16,128], param_1: f32[256000,128]) -> f32[16,256000] {
  %param_0 = f32[16,128]{1,0} parameter(0)
  %param_1 = f32[256000,128]{1,0} parameter(1)
  ROOT %dot.255 = f32[16,256000]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={1}, metadata={op_name="jit(generate)/FlaxGemmaForCausalLMModule/lm_head/dot_general" stack_frame_id=269}
}
%region_11.16.clone (reduce.3: f32[], reduce.8: s32[], reduce.9: f32[], reduce.10: s32[]) -> (f32[], s32[]) {
  %reduce.3 = f32[] parameter(0), metadata={op_name="reduce"}
  %reduce.8 = s32[] parameter(1), metadata={op_name="reduce"}
  %reduce.9 = f32[] parameter(2), metadata={op_name="reduce"}
  %reduce.10 = s32[] parameter(3), metadata={op_name="reduce"}
  %ne.0 = pred[] compare(%reduce.3, %reduce.3), direction=NE, metadata={op_name="ne" stack_frame_id=39}
  %gt.0 = pred[] compare(%reduce.3, %reduce.9), direction=GT, metadata={op_name="gt" stack_frame_id=39}
  %eq.0 = pred[] compare(%reduce.3, %reduce.9), direction=EQ, metadata={op_name="eq" stack_frame_id=39}
  %lt.0 = pred[] compare(%reduce.8, %reduce.10), direction=LT, metadata={op_name="lt" stack_frame_id=39}
  %or.0 = pred[] or(%gt.0, %ne.0), metadata={op_name="or" stack_frame_id=39}
  %and.0 = pred[] and(%eq.0, %lt.0), metadata={op_name="and" stack_frame_id=39}
  %select_n.0 = f32[] select(%or.0, %reduce.3, %reduce.9), metadata={op_name="select_n" stack_frame_id=39}
  %or.1 = pred[] or(%or.0, %and.0), metadata={op_name="or" stack_frame_id=39}
  %select_n.2 = s32[] select(%or.1, %reduce.8, %reduce.10), metadata={op_name="select_n" stack_frame_id=39}
  ROOT %tuple.0 = (f32[], s32[]) tuple(%select_n.0, %select_n.2)
}
%fused_computation.65 (param_0.181: f32[16,256000]) -> (f32[1], s32[1]) {
  %param_0.181 = f32[16,256000]{1,0} parameter(0)
  %bitcast.283 = f32[1,16,256000]{2,1,0} bitcast(%param_0.181), metadata={op_name="jit(generate)/FlaxGemmaForCausalLMModule/lm_head/dot_general" stack_frame_id=269}
  %slice.169 = f32[1,1,256000]{2,1,0} slice(%bitcast.283), slice={[0:1], [15:16], [0:256000]}, metadata={op_name="jit(generate)/slice" stack_frame_id=270}
  %bitcast.282 = f32[1,256000]{1,0} bitcast(%slice.169), metadata={op_name="jit(generate)/slice" stack_frame_id=270}
  %iota.116 = s32[1,256000]{1,0} iota(), iota_dimension=1, metadata={op_name="jit(generate)/iota" stack_frame_id=290}
  %constant.898 = f32[] constant(-inf)
  %constant.899 = s32[] constant(0)
  ROOT %reduce.58 = (f32[1]{0}, s32[1]{0}) reduce(%bitcast.282, %iota.116, %constant.898, %constant.899), dimensions={1}, to_apply=%region_11.16.clone, metadata={op_name="jit(generate)/reduce" stack_frame_id=290}
}
ENTRY %main.36 (multiply_bitcast_fusion: f32[16,128], params__model____embed_tokens____embedding__.1: f32[256000,128]) -> s32[1] {
  %multiply_bitcast_fusion = f32[16,128]{1,0} parameter(0)
  %params__model____embed_tokens____embedding__.1 = f32[256000,128]{1,0} parameter(1), metadata={op_name="params[\'model\'][\'embed_tokens\'][\'embedding\']"}
  %ynn_fusion = f32[16,256000]{1,0} fusion(%multiply_bitcast_fusion, %params__model____embed_tokens____embedding__.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(generate)/FlaxGemmaForCausalLMModule/lm_head/dot_general" stack_frame_id=269}, backend_config={"outer_dimension_partitions":[],"fusion_config":{"kind":"__ynn_fusion"}}
  %iota_reduce_fusion.1 = (f32[1]{0}, s32[1]{0}) fusion(%ynn_fusion), kind=kLoop, calls=%fused_computation.65, metadata={op_name="jit(generate)/reduce" stack_frame_id=290}
  ROOT %reduce.17 = s32[1]{0} get-tuple-element(%iota_reduce_fusion.1), index=1, metadata={op_name="jit(generate)/reduce" stack_frame_id=290}
}
"""

# tests/rules/programs/prefill_logits.py prefill_half: the slice keeps half of the positions.
_HALF_KEPT = """\
HloModule jit_prefill_half, is_scheduled=true, entry_computation_layout={(f32[4,16,128]{2,1,0}, f32[128,32000]{1,0})->s32[4,8]{1,0}}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true}
FileNames
1 "tests/rules/programs/prefill_logits.py"
2 "<string>"
FunctionNames
1 "prefill_half"
2 "<module>"
FileLocations
1 {file_name_id=1 function_name_id=1 line=32 end_line=32 column=11 end_column=58}
2 {file_name_id=2 function_name_id=2 line=5 end_line=5 column=8 end_column=39}
3 {file_name_id=1 function_name_id=1 line=31 end_line=31 column=13 end_column=18}
4 {file_name_id=1 function_name_id=1 line=32 end_line=32 column=22 end_column=48}
StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=1 parent_frame_id=2}
3 {file_location_id=2 parent_frame_id=1}
4 {file_location_id=3 parent_frame_id=4}
5 {file_location_id=4 parent_frame_id=4}
6 {file_location_id=1 parent_frame_id=4}
7 {file_location_id=1 parent_frame_id=7}
%fused_computation (param_0: f32[64,128], param_1: f32[128,32000]) -> f32[64,32000] {
  %param_0 = f32[64,128]{1,0} parameter(0)
  %param_1 = f32[128,32000]{1,0} parameter(1)
  ROOT %dot.1 = f32[64,32000]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(prefill_half)/dot_general" stack_frame_id=4}
}
%region_0.1 (reduce.4: f32[], reduce.5: s32[], reduce.6: f32[], reduce.7: s32[]) -> (f32[], s32[]) {
  %reduce.4 = f32[] parameter(0), metadata={op_name="reduce"}
  %reduce.5 = s32[] parameter(1), metadata={op_name="reduce"}
  %reduce.6 = f32[] parameter(2), metadata={op_name="reduce"}
  %reduce.7 = s32[] parameter(3), metadata={op_name="reduce"}
  %ne.1 = pred[] compare(%reduce.4, %reduce.4), direction=NE, metadata={op_name="ne" stack_frame_id=2}
  %gt.1 = pred[] compare(%reduce.4, %reduce.6), direction=GT, metadata={op_name="gt" stack_frame_id=2}
  %eq.1 = pred[] compare(%reduce.4, %reduce.6), direction=EQ, metadata={op_name="eq" stack_frame_id=2}
  %lt.1 = pred[] compare(%reduce.5, %reduce.7), direction=LT, metadata={op_name="lt" stack_frame_id=2}
  %or.2 = pred[] or(%gt.1, %ne.1), metadata={op_name="or" stack_frame_id=2}
  %and.1 = pred[] and(%eq.1, %lt.1), metadata={op_name="and" stack_frame_id=2}
  %select_n.2 = f32[] select(%or.2, %reduce.4, %reduce.6), metadata={op_name="select_n" stack_frame_id=2}
  %or.3 = pred[] or(%or.2, %and.1), metadata={op_name="or" stack_frame_id=2}
  %select_n.3 = s32[] select(%or.3, %reduce.5, %reduce.7), metadata={op_name="select_n" stack_frame_id=2}
  ROOT %tuple.1 = (f32[], s32[]) tuple(%select_n.2, %select_n.3)
}
%fused_computation.1 (param_0.3: f32[64,32000]) -> (f32[4,8], s32[4,8]) {
  %param_0.3 = f32[64,32000]{1,0} parameter(0)
  %bitcast.2 = f32[4,16,32000]{2,1,0} bitcast(%param_0.3), metadata={op_name="jit(prefill_half)/dot_general" stack_frame_id=4}
  %slice.0 = f32[4,8,32000]{2,1,0} slice(%bitcast.2), slice={[0:4], [8:16], [0:32000]}, metadata={op_name="jit(prefill_half)/slice" stack_frame_id=5}
  %iota.5 = s32[4,8,32000]{2,1,0} iota(), iota_dimension=2, metadata={op_name="jit(prefill_half)/iota" stack_frame_id=7}
  %constant.5 = f32[] constant(-inf), metadata={op_name="jit(prefill_half)" stack_frame_id=6}
  %constant.4 = s32[] constant(0), metadata={op_name="jit(prefill_half)" stack_frame_id=6}
  ROOT %reduce.2 = (f32[4,8]{1,0}, s32[4,8]{1,0}) reduce(%slice.0, %iota.5, %constant.5, %constant.4), dimensions={2}, to_apply=%region_0.1, metadata={op_name="jit(prefill_half)/reduce" stack_frame_id=7}
}
ENTRY %main.3 (h.1: f32[4,16,128], w.1: f32[128,32000]) -> s32[4,8] {
  %h.1 = f32[4,16,128]{2,1,0} parameter(0), metadata={op_name="h"}
  %w.1 = f32[128,32000]{1,0} parameter(1), metadata={op_name="w"}
  %bitcast = f32[64,128]{1,0} bitcast(%h.1), metadata={op_name="h"}
  %ynn_fusion = f32[64,32000]{1,0} fusion(%bitcast, %w.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(prefill_half)/dot_general" stack_frame_id=4}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  %iota_reduce_fusion = (f32[4,8]{1,0}, s32[4,8]{1,0}) fusion(%ynn_fusion), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(prefill_half)/reduce" stack_frame_id=7}, backend_config={"outer_dimension_partitions":["2"]}
  ROOT %reduce.1 = s32[4,8]{1,0} get-tuple-element(%iota_reduce_fusion), index=1, metadata={op_name="jit(prefill_half)/reduce" stack_frame_id=7}
}
"""

# tests/rules/programs/prefill_logits.py prefill_all: every position's logits are returned.
_ALL_RETURNED = """\
HloModule jit_prefill_all, is_scheduled=true, entry_computation_layout={(f32[4,16,128]{2,1,0}, f32[128,32000]{1,0})->(s32[4]{0}, f32[4,16,32000]{2,1,0})}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true,true}
FileNames
1 "tests/rules/programs/prefill_logits.py"
2 "<string>"
FunctionNames
1 "prefill_all"
2 "<module>"
FileLocations
1 {file_name_id=1 function_name_id=1 line=38 end_line=38 column=11 end_column=45}
2 {file_name_id=2 function_name_id=2 line=5 end_line=5 column=8 end_column=39}
3 {file_name_id=1 function_name_id=1 line=37 end_line=37 column=13 end_column=18}
4 {file_name_id=1 function_name_id=1 line=38 end_line=38 column=22 end_column=35}
StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=1 parent_frame_id=2}
3 {file_location_id=2 parent_frame_id=1}
4 {file_location_id=3 parent_frame_id=4}
5 {file_location_id=4 parent_frame_id=4}
6 {file_location_id=1 parent_frame_id=4}
7 {file_location_id=1 parent_frame_id=7}
%fused_computation (param_0: f32[64,128], param_1: f32[128,32000]) -> f32[64,32000] {
  %param_0 = f32[64,128]{1,0} parameter(0)
  %param_1 = f32[128,32000]{1,0} parameter(1)
  ROOT %dot.1 = f32[64,32000]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(prefill_all)/dot_general" stack_frame_id=4}
}
%region_0.1 (reduce.4: f32[], reduce.5: s32[], reduce.6: f32[], reduce.7: s32[]) -> (f32[], s32[]) {
  %reduce.4 = f32[] parameter(0), metadata={op_name="reduce"}
  %reduce.5 = s32[] parameter(1), metadata={op_name="reduce"}
  %reduce.6 = f32[] parameter(2), metadata={op_name="reduce"}
  %reduce.7 = s32[] parameter(3), metadata={op_name="reduce"}
  %ne.1 = pred[] compare(%reduce.4, %reduce.4), direction=NE, metadata={op_name="ne" stack_frame_id=2}
  %gt.1 = pred[] compare(%reduce.4, %reduce.6), direction=GT, metadata={op_name="gt" stack_frame_id=2}
  %eq.1 = pred[] compare(%reduce.4, %reduce.6), direction=EQ, metadata={op_name="eq" stack_frame_id=2}
  %lt.1 = pred[] compare(%reduce.5, %reduce.7), direction=LT, metadata={op_name="lt" stack_frame_id=2}
  %or.2 = pred[] or(%gt.1, %ne.1), metadata={op_name="or" stack_frame_id=2}
  %and.1 = pred[] and(%eq.1, %lt.1), metadata={op_name="and" stack_frame_id=2}
  %select_n.2 = f32[] select(%or.2, %reduce.4, %reduce.6), metadata={op_name="select_n" stack_frame_id=2}
  %or.3 = pred[] or(%or.2, %and.1), metadata={op_name="or" stack_frame_id=2}
  %select_n.3 = s32[] select(%or.3, %reduce.5, %reduce.7), metadata={op_name="select_n" stack_frame_id=2}
  ROOT %tuple.1 = (f32[], s32[]) tuple(%select_n.2, %select_n.3)
}
%fused_computation.1 (param_0.4: f32[64,32000]) -> (f32[4], s32[4]) {
  %param_0.4 = f32[64,32000]{1,0} parameter(0)
  %bitcast.4 = f32[4,16,32000]{2,1,0} bitcast(%param_0.4), metadata={op_name="jit(prefill_all)/dot_general" stack_frame_id=4}
  %slice.0 = f32[4,1,32000]{2,1,0} slice(%bitcast.4), slice={[0:4], [15:16], [0:32000]}, metadata={op_name="jit(prefill_all)/slice" stack_frame_id=5}
  %bitcast.3 = f32[4,32000]{1,0} bitcast(%slice.0), metadata={op_name="jit(prefill_all)/slice" stack_frame_id=5}
  %iota.5 = s32[4,32000]{1,0} iota(), iota_dimension=1, metadata={op_name="jit(prefill_all)/iota" stack_frame_id=7}
  %constant.5 = f32[] constant(-inf), metadata={op_name="jit(prefill_all)" stack_frame_id=6}
  %constant.4 = s32[] constant(0), metadata={op_name="jit(prefill_all)" stack_frame_id=6}
  ROOT %reduce.2 = (f32[4]{0}, s32[4]{0}) reduce(%bitcast.3, %iota.5, %constant.5, %constant.4), dimensions={1}, to_apply=%region_0.1, metadata={op_name="jit(prefill_all)/reduce" stack_frame_id=7}
}
ENTRY %main.3 (h.1: f32[4,16,128], w.1: f32[128,32000]) -> (s32[4], f32[4,16,32000]) {
  %h.1 = f32[4,16,128]{2,1,0} parameter(0), metadata={op_name="h"}
  %w.1 = f32[128,32000]{1,0} parameter(1), metadata={op_name="w"}
  %bitcast = f32[64,128]{1,0} bitcast(%h.1), metadata={op_name="h"}
  %ynn_fusion = f32[64,32000]{1,0} fusion(%bitcast, %w.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(prefill_all)/dot_general" stack_frame_id=4}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  %bitcast.1 = f32[4,16,32000]{2,1,0} bitcast(%ynn_fusion), metadata={op_name="jit(prefill_all)/dot_general" stack_frame_id=4}
  %iota_reduce_fusion = (f32[4]{0}, s32[4]{0}) fusion(%ynn_fusion), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(prefill_all)/reduce" stack_frame_id=7}, backend_config={"outer_dimension_partitions":["2"]}
  %reduce.1 = s32[4]{0} get-tuple-element(%iota_reduce_fusion), index=1, metadata={op_name="jit(prefill_all)/reduce" stack_frame_id=7}
  ROOT %tuple.3 = (s32[4]{0}, f32[4,16,32000]{2,1,0}) tuple(%reduce.1, %bitcast.1)
}
"""


# XLA's latency_hiding_scheduler_test.cc (openxla/xla 9a77a882, as XLA re-prints it): a convolution
# with no metadata in a while body, sliced to a quarter: hand-written HLO, no line to change.
_NO_METADATA = """\
HloModule module, is_scheduled=true, entry_computation_layout={(f32[256,1024]{1,0}, f32[16,64,256]{2,1,0}, f32[16,64,256]{2,1,0}, pred[])->(f32[16,64,256]{2,1,0}, f32[16,256,256]{2,1,0}, f32[1024,1024]{1,0})}

%while_body (param.1: (f32[16,64,256], f32[16,64,256], pred[])) -> (f32[16,64,256], f32[16,64,256], pred[]) {
  %param.1 = (f32[16,64,256]{2,1,0}, f32[16,64,256]{2,1,0}, pred[]) parameter(0)
  %gte0 = f32[16,64,256]{2,1,0} get-tuple-element(%param.1), index=0
  %gte1 = f32[16,64,256]{2,1,0} get-tuple-element(%param.1), index=1
  %gte2 = pred[] get-tuple-element(%param.1), index=2
  %cps1 = (f32[16,64,256]{2,1,0}, f32[16,64,256]{2,1,0}, u32[], u32[]) collective-permute-start(%gte1), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}, frontend_attributes={_scheduling_group_id="1"}
  %cpd1 = f32[16,64,256]{2,1,0} collective-permute-done(%cps1), frontend_attributes={_scheduling_group_id="1"}
  %c1 = f32[16,256,256]{2,1,0} convolution(%gte0, %gte0), window={size=16 stride=15 lhs_dilate=16}, dim_labels=0fb_0io->0fb, frontend_attributes={_scheduling_group_id="1"}
  %slice = f32[16,64,256]{2,1,0} slice(%c1), slice={[0:16], [0:64], [0:256]}
  %add = f32[16,64,256]{2,1,0} add(%gte0, %slice)
  ROOT %tuple = (f32[16,64,256]{2,1,0}, f32[16,64,256]{2,1,0}, pred[]) tuple(%add, %cpd1, %gte2)
}

%while_cond (param: (f32[16,64,256], f32[16,64,256], pred[])) -> pred[] {
  %param = (f32[16,64,256]{2,1,0}, f32[16,64,256]{2,1,0}, pred[]) parameter(0)
  ROOT %gte = pred[] get-tuple-element(%param), index=2
}

ENTRY %entry (p0: f32[256,1024], p1: f32[16,64,256], p2: f32[16,64,256], p3: pred[]) -> (f32[16,64,256], f32[16,256,256], f32[1024,1024]) {
  %p0 = f32[256,1024]{1,0} parameter(0)
  %p1 = f32[16,64,256]{2,1,0} parameter(1)
  %p2 = f32[16,64,256]{2,1,0} parameter(2)
  %p3 = pred[] parameter(3)
  %c0 = f32[16,256,256]{2,1,0} convolution(%p1, %p2), window={size=16 stride=15 lhs_dilate=16}, dim_labels=0fb_0io->0fb, frontend_attributes={_scheduling_group_id="1"}
  %ags0 = (f32[256,1024]{1,0}, f32[1024,1024]{1,0}) all-gather-start(%p0), replica_groups={{0,1,2,3}}, dimensions={0}, frontend_attributes={_scheduling_group_id="1"}
  %tuple.1 = (f32[16,64,256]{2,1,0}, f32[16,64,256]{2,1,0}, pred[]) tuple(%p1, %p2, %p3)
  %while = (f32[16,64,256]{2,1,0}, f32[16,64,256]{2,1,0}, pred[]) while(%tuple.1), condition=%while_cond, body=%while_body
  %agd0 = f32[1024,1024]{1,0} all-gather-done(%ags0), frontend_attributes={_scheduling_group_id="1"}
  %gte.1 = f32[16,64,256]{2,1,0} get-tuple-element(%while), index=0
  ROOT %tuple1 = (f32[16,64,256]{2,1,0}, f32[16,256,256]{2,1,0}, f32[1024,1024]{1,0}) tuple(%gte.1, %c0, %agd0)
}
"""

class ResultComputedThenDiscarded(Rule):
    """A matmul computed for every row and then sliced to a few: ``(x @ W)[:, -1]``.

    What it flags:
        A dot, convolution or library matmul (or a fusion holding one) whose every use, followed
        through bitcasts, copies, transposes, fusion parameters and the elementwise work inside a
        fusion, reads only a ``slice``, ``dynamic-slice`` or ``gather`` of it, together less than
        half of its elements (threshold 0.5). Typically a prefill applying the LM head to every
        prompt position and keeping the last one, the slice fused into the argmax that reads it.
        Not flagged: a result used whole anywhere (returned, reduced, fed to another matmul),
        slices that together keep half of it or more, a matmul without metadata (hand-written HLO
        or XLA's own: no line to change). Only optimized modules are read: before XLA's passes its
        algebraic simplifier can still move a slice into the dot (its slice-dot reorder).
    Why it costs:
        The matmul's time is spent on every row, the program reads a few of them. Recoverable:
        (1 - kept fraction) x the producer's op-stats time. Where the remaining matmul is bound by
        reading its weights (one row against a large matrix), slicing first saves less than that:
        measured on XLA:CPU (both programs in one trace), the estimate was 1.05x and 1.13x the
        saving on transformers' Flax GPT-2 and Gemma prefills, 1.10x and 1.20x on
        ``(h @ W)[:, -1]`` at 8x16x256 by 32000 and 256000.
    Example:
        transformers' Flax Gemma ``generate``: the prefill's ``lm_head`` over 16 positions, f32[16,256000],
        of which the argmax reads ``logits[:, -1]``: 15/16 of the matmul discarded.
    Fix:
        Slice the input before the matmul: ``x[:, -1:] @ W`` instead of ``(x @ W)[:, -1]``
        (for a model, compute the hidden states of every position and apply the head to the last).
    """

    code = "HD012"
    name = "result.computed-then-discarded"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = "slice-before-matmul"

    VALID = (
        Example(hlo=(_HALF_KEPT,), note="half of the positions kept: at the threshold"),
        Example(hlo=(_ALL_RETURNED,), note="the logits of every position are returned"),
        Example(hlo=(_NO_METADATA,), note="XLA's scheduler test: a convolution without metadata"),
    )
    INVALID = (
        Example(hlo=(_LM_HEAD_EVERY_POSITION,), expect=("HD012 ynn_fusion",),
                note="transformers' Flax Gemma prefill: lm_head over 16 positions, the last one kept"),
        Example(
            hlo=(_LM_HEAD_EVERY_POSITION,),
            opstats=({"module": "jit_generate", "op": "ynn_fusion", "occurrences": 3,
                      "time_per_step_us": 103595.609, "category": "matmul"},),
            step_time_us=541423.0, num_steps=3, expect=("HD012 ynn_fusion",),
            note="with the capture's op stats: 15/16 of 103.6 ms per step recoverable",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            if not stage_of(m, ctx.origin).optimized:
                continue  # XLA's algebraic simplifier can still move the slice into the dot (its slice-dot reorder)
            by_comp = callers(m)
            for op in m.instructions():
                caller = by_comp.get(op.computation)
                if op.computation != m.entry_name and (caller is None or caller.opcode not in _LEVEL_CALLERS):
                    continue  # not run op by op: inside a fusion, a reducer or a comparator
                if not is_matmul_op(m, op) or not key_instruction(m, op).op_name:
                    continue  # a matmul without metadata was not traced from a program: no line to change
                read = partial_read(m, op)
                if read is None or read.kept_fraction >= THRESHOLD:
                    continue
                value = op.shape.elements[0] if op.shape.is_tuple else op.shape
                discarded = int(value.nbytes * (1.0 - read.kept_fraction))
                if discarded < MIN_DISCARDED_BYTES:
                    continue
                yield self._finding(ctx, m, op, read, discarded)

    def _finding(self, ctx: Context, m: HloModule, op: HloInstruction, read: PartialRead,
                 discarded: int) -> Finding:
        value = op.shape.elements[0] if op.shape.is_tuple else op.shape
        kept = read.kept_fraction
        slices = "; ".join(_slice_text(s) for s in read.reads[:4]) + ("; ..." if len(read.reads) > 4 else "")
        matmul = key_instruction(m, op)
        origin = origin_of(m, matmul)
        where = origin.where()
        cut = origin_of(m, read.reads[0]).where()
        message = (f"{op.name} computes {dtype_shape(value)} and its uses read only {read.kept:,} of its "
                   f"{read.total:,} elements ({kept:.1%}, {_fraction(read)}): {slices}; "
                   f"{fmt_bytes(discarded)} of the result and {1 - kept:.1%} of its work are discarded"
                   + (f"; the matmul is {where}" if where else "") + (f", the slice {cut}" if cut else "")
                   + f". Fix: {_fix(matmul)}")
        return ctx.finding(
            self, m, op, message, recoverable_fraction=1.0 - kept, evidence=(op.raw, *(s.raw for s in read.reads[:4])),
            fix="" if origin.framework else None,
            extra=(("kept_fraction", round(kept, 6)), ("kept_elements", read.kept), ("total_elements", read.total),
                   ("producer_shape", dtype_shape(value)), ("slices", [_slice_text(s) for s in read.reads])),
        )


def _fix(matmul: HloInstruction) -> str:
    """What to change, for a matmul or a convolution."""
    if matmul.opcode == "convolution":
        return ("slice the convolution's input (or its kernel's output features) to the part kept, before "
                "the convolution")
    return "slice the input before the matmul (x[:, -1:] @ W instead of (x @ W)[:, -1])"


def _slice_text(inst: HloInstruction) -> str:
    """``slice.169 [0:1], [15:16], [0:256000]`` / ``dynamic-slice.3 f32[1,1,256000]``."""
    spec = inst.attribute("slice").strip("{}")
    return f"{inst.name} {spec}" if spec else f"{inst.name} {dtype_shape(inst.shape)}"


def _fraction(read: PartialRead) -> str:
    """``1/16 kept`` when the kept part is a whole fraction of the result."""
    if read.kept and read.total % read.kept == 0:
        return f"1/{read.total // read.kept} kept"
    return f"{read.kept / read.total:.3f} kept"
