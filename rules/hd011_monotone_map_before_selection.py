"""HD011: a monotone map (softmax, exp, x / T) computed only for an argmax/argmin/top-k to read."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.analysis import dtype_shape
from hlo_doctor.hlo.origin import origin_of
from hlo_doctor.hlo.selection_cost import (
    describe,
    fix_text,
    fused_share,
    is_map_work,
    line_instruction,
    source_share,
)
from hlo_doctor.hlo.selection_flow import MonotoneMap, monotone_maps
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, stage_of
from hlo_doctor.lint.parts import bounded
from hlo_doctor.lint.testing import ARGMAX_F32_TOKENS

# keras-hub 0.32.0's GemmaCausalLM.generate (GreedySampler, vocab 256000, XLA:CPU): the sampler's
# softmax(logits / temperature) and keras' argmax, cut from the while body of the optimized module
# (runs/field/hlo/kh-gemma-v256k-s32, module_0030): the computations involved and the body's lines,
# as printed; the LM head's result (copy_dot_fusion) is the entry parameter, stacks kept 4 frames deep.
_KERAS_HUB_SAMPLER = """\
HloModule jit_compiled_generate_function, is_scheduled=true, entry_computation_layout={(f32[256000]{0})->s32[1]{0}}
FileNames
10 "/work/fieldvenv/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py"
15 "/work/fieldvenv/lib/python3.11/site-packages/keras/src/ops/numpy.py"
16 "/work/fieldvenv/lib/python3.11/site-packages/keras/src/backend/jax/numpy.py"
19 "/work/fieldvenv/lib/python3.11/site-packages/keras/src/activations/activations.py"
20 "/work/fieldvenv/lib/python3.11/site-packages/keras/src/ops/nn.py"
21 "/work/fieldvenv/lib/python3.11/site-packages/keras/src/backend/jax/nn.py"
22 "/work/fieldvenv/lib/python3.11/site-packages/keras_hub/src/samplers/sampler.py"
25 "/work/fieldvenv/lib/python3.11/site-packages/keras_hub/src/samplers/greedy_sampler.py"
26 "/work/fieldvenv/lib/python3.11/site-packages/keras/src/layers/core/reversible_embedding.py"
FunctionNames
26 "inject_argument_info_in_traceback.<locals>.error_handler"
33 "softmax"
42 "Sampler.__call__.<locals>.body"
44 "Sampler.compute_probabilities"
45 "GreedySampler.get_next_token"
46 "argmax"
48 "ReversibleEmbedding.call"
81 "matmul"
FileLocations
26 {file_name_id=10 function_name_id=26 line=156 end_line=156 column=19 end_column=38}
35 {file_name_id=19 function_name_id=33 line=158 end_line=158 column=13 end_column=38}
36 {file_name_id=20 function_name_id=33 line=986 end_line=986 column=15 end_column=47}
37 {file_name_id=21 function_name_id=33 line=159 end_line=159 column=11 end_column=36}
59 {file_name_id=22 function_name_id=44 line=139 end_line=139 column=15 end_column=67}
60 {file_name_id=22 function_name_id=42 line=112 end_line=112 column=25 end_column=59}
61 {file_name_id=25 function_name_id=45 line=36 end_line=36 column=15 end_column=49}
62 {file_name_id=15 function_name_id=46 line=1086 end_line=1086 column=11 end_column=64}
63 {file_name_id=16 function_name_id=46 line=434 end_line=434 column=11 end_column=54}
183 {file_name_id=26 function_name_id=48 line=137 end_line=137 column=21 end_column=47}
184 {file_name_id=15 function_name_id=81 line=5114 end_line=5114 column=11 end_column=39}
185 {file_name_id=16 function_name_id=81 line=182 end_line=182 column=11 end_column=76}
190 {file_name_id=16 function_name_id=46 line=432 end_line=432 column=24 end_column=32}
191 {file_name_id=16 function_name_id=46 line=432 end_line=432 column=36 end_column=50}
192 {file_name_id=16 function_name_id=46 line=432 end_line=432 column=23 end_column=50}
193 {file_name_id=16 function_name_id=46 line=433 end_line=433 column=8 end_column=64}
StackFrames
135 {file_location_id=59 parent_frame_id=135}
136 {file_location_id=35 parent_frame_id=136}
137 {file_location_id=36 parent_frame_id=137}
138 {file_location_id=37 parent_frame_id=138}
147 {file_location_id=60 parent_frame_id=147}
148 {file_location_id=61 parent_frame_id=148}
149 {file_location_id=62 parent_frame_id=149}
150 {file_location_id=63 parent_frame_id=150}
459 {file_location_id=26 parent_frame_id=459}
463 {file_location_id=183 parent_frame_id=460}
464 {file_location_id=184 parent_frame_id=464}
465 {file_location_id=185 parent_frame_id=465}
470 {file_location_id=60 parent_frame_id=79}
471 {file_location_id=61 parent_frame_id=471}
472 {file_location_id=62 parent_frame_id=472}
473 {file_location_id=190 parent_frame_id=473}
474 {file_location_id=191 parent_frame_id=473}
475 {file_location_id=192 parent_frame_id=473}
476 {file_location_id=193 parent_frame_id=473}
783 {file_location_id=60 parent_frame_id=783}
784 {file_location_id=61 parent_frame_id=784}
785 {file_location_id=62 parent_frame_id=785}
786 {file_location_id=63 parent_frame_id=786}
%region_23.31 (reduce_sum.87: f32[], reduce_sum.88: f32[]) -> f32[] {
  %reduce_sum.87 = f32[] parameter(0), metadata={op_name="reduce_sum"}
  %reduce_sum.88 = f32[] parameter(1), metadata={op_name="reduce_sum"}
  ROOT %reduce_sum.89 = f32[] add(%reduce_sum.87, %reduce_sum.88), metadata={op_name="jit(compiled_generate_function)/while/body/reduce_sum" stack_frame_id=138}
}
%fused_computation (param_0: f32[1,256000], param_1: f32[]) -> f32[1] {
  %param_0 = f32[1,256000]{1,0} parameter(0)
  %param_1 = f32[] parameter(1)
  ROOT %reduce_sum.123 = f32[1]{0} reduce(%param_0, %param_1), dimensions={1}, to_apply=%region_23.31, metadata={op_name="jit(compiled_generate_function)/while/body/reduce_sum" stack_frame_id=138}
}
%region_22.30 (reduce_max.24: f32[], reduce_max.25: f32[]) -> f32[] {
  %reduce_max.24 = f32[] parameter(0), metadata={op_name="reduce_max"}
  %reduce_max.25 = f32[] parameter(1), metadata={op_name="reduce_max"}
  ROOT %reduce_max.26 = f32[] maximum(%reduce_max.24, %reduce_max.25), metadata={op_name="jit(compiled_generate_function)/while/body/reduce_max" stack_frame_id=138}
}
%fused_computation.1 (param_0.2: f32[], param_1.2: f32[256000]) -> f32[1,256000] {
  %param_1.2 = f32[256000]{0} parameter(1)
  %bitcast.204 = f32[1,256000]{1,0} bitcast(%param_1.2), metadata={op_name="jit(compiled_generate_function)/while/body/token_embedding/dot_general" stack_frame_id=465}
  %param_0.2 = f32[] parameter(0)
  %reduce_max.37 = f32[1]{0} reduce(%bitcast.204, %param_0.2), dimensions={1}, to_apply=%region_22.30, metadata={op_name="jit(compiled_generate_function)/while/body/reduce_max" stack_frame_id=138}
  %bitcast.203 = f32[] bitcast(%reduce_max.37), metadata={op_name="jit(compiled_generate_function)/while/body/reduce_max" stack_frame_id=138}
  %sub.60 = f32[1,256000]{1,0} broadcast(%bitcast.203), dimensions={}, metadata={op_name="jit(compiled_generate_function)/while/body/sub" stack_frame_id=138}
  %sub.61 = f32[1,256000]{1,0} subtract(%bitcast.204, %sub.60), metadata={op_name="jit(compiled_generate_function)/while/body/sub" stack_frame_id=138}
  ROOT %exp.25 = f32[1,256000]{1,0} exponential(%sub.61), metadata={op_name="jit(compiled_generate_function)/while/body/exp" stack_frame_id=138}
}
%region_24.34 (reduce.4: f32[], reduce.5: s32[], reduce.6: f32[], reduce.7: s32[]) -> (f32[], s32[]) {
  %reduce.4 = f32[] parameter(0), metadata={op_name="reduce"}
  %reduce.5 = s32[] parameter(1), metadata={op_name="reduce"}
  %reduce.6 = f32[] parameter(2), metadata={op_name="reduce"}
  %reduce.7 = s32[] parameter(3), metadata={op_name="reduce"}
  %ne.1 = pred[] compare(%reduce.4, %reduce.4), direction=NE, metadata={op_name="ne" stack_frame_id=150}
  %gt.1 = pred[] compare(%reduce.4, %reduce.6), direction=GT, metadata={op_name="gt" stack_frame_id=150}
  %eq.6 = pred[] compare(%reduce.4, %reduce.6), direction=EQ, metadata={op_name="eq" stack_frame_id=150}
  %lt.12 = pred[] compare(%reduce.5, %reduce.7), direction=LT, metadata={op_name="lt" stack_frame_id=150}
  %or.2 = pred[] or(%gt.1, %ne.1), metadata={op_name="or" stack_frame_id=150}
  %and.6 = pred[] and(%eq.6, %lt.12), metadata={op_name="and" stack_frame_id=150}
  %select_n.25 = f32[] select(%or.2, %reduce.4, %reduce.6), metadata={op_name="select_n" stack_frame_id=150}
  %or.3 = pred[] or(%or.2, %and.6), metadata={op_name="or" stack_frame_id=150}
  %select_n.26 = s32[] select(%or.3, %reduce.5, %reduce.7), metadata={op_name="select_n" stack_frame_id=150}
  ROOT %tuple.1 = (f32[], s32[]) tuple(%select_n.25, %select_n.26)
}
%fused_computation.24 (param_0.32: f32[1,256000], param_1.38: f32[1]) -> (f32[1], s32[1]) {
  %param_0.32 = f32[1,256000]{1,0} parameter(0)
  %param_1.38 = f32[1]{0} parameter(1)
  %bitcast.215 = f32[] bitcast(%param_1.38), metadata={op_name="jit(compiled_generate_function)/while/body/div" stack_frame_id=138}
  %broadcast.394 = f32[1,256000]{1,0} broadcast(%bitcast.215), dimensions={}, metadata={op_name="jit(compiled_generate_function)/while/body/div" stack_frame_id=138}
  %multiply.175 = f32[1,256000]{1,0} multiply(%param_0.32, %broadcast.394), metadata={op_name="jit(compiled_generate_function)/while/body/div" stack_frame_id=138}
  %constant.444 = f32[] constant(0)
  %broadcast.393 = f32[1,256000]{1,0} broadcast(%constant.444), dimensions={}
  %eq.30 = pred[1,256000]{1,0} compare(%multiply.175, %broadcast.393), direction=EQ, metadata={op_name="jit(compiled_generate_function)/while/body/eq" stack_frame_id=473}
  %bitcast_convert_type.9 = s32[1,256000]{1,0} bitcast-convert(%multiply.175), metadata={op_name="jit(compiled_generate_function)/while/body/jit(signbit)/bitcast_convert_type" stack_frame_id=474}
  %constant.445 = s32[] constant(31), metadata={op_name="jit(compiled_generate_function)/while/body/jit(signbit)" stack_frame_id=474}
  %shift_right_arithmetic.19 = s32[1,256000]{1,0} broadcast(%constant.445), dimensions={}, metadata={op_name="jit(compiled_generate_function)/while/body/jit(signbit)/shift_right_arithmetic" stack_frame_id=474}
  %shift_right_arithmetic.18 = s32[1,256000]{1,0} shift-right-arithmetic(%bitcast_convert_type.9, %shift_right_arithmetic.19), metadata={op_name="jit(compiled_generate_function)/while/body/jit(signbit)/shift_right_arithmetic" stack_frame_id=474}
  %constant.447 = s32[] constant(0)
  %convert_element_type.88 = s32[1,256000]{1,0} broadcast(%constant.447), dimensions={}, metadata={op_name="jit(compiled_generate_function)/while/body/jit(signbit)/convert_element_type" stack_frame_id=474}
  %convert_element_type.87 = pred[1,256000]{1,0} compare(%shift_right_arithmetic.18, %convert_element_type.88), direction=NE, metadata={op_name="jit(compiled_generate_function)/while/body/jit(signbit)/convert_element_type" stack_frame_id=474}
  %and.22 = pred[1,256000]{1,0} and(%eq.30, %convert_element_type.87), metadata={op_name="jit(compiled_generate_function)/while/body/and" stack_frame_id=475}
  %constant.443 = f32[] constant(-1.17549435e-38)
  %broadcast_in_dim.234 = f32[1,256000]{1,0} broadcast(%constant.443), dimensions={}, metadata={op_name="jit(compiled_generate_function)/while/body/jit(_where)/broadcast_in_dim" stack_frame_id=476}
  %select_n.179 = f32[1,256000]{1,0} select(%and.22, %broadcast_in_dim.234, %multiply.175), metadata={op_name="jit(compiled_generate_function)/while/body/jit(_where)/select_n" stack_frame_id=476}
  %iota.68 = s32[1,256000]{1,0} iota(), iota_dimension=1, metadata={op_name="jit(compiled_generate_function)/while/body/iota" stack_frame_id=786}
  %constant.446 = f32[] constant(-inf)
  ROOT %reduce.37 = (f32[1]{0}, s32[1]{0}) reduce(%select_n.179, %iota.68, %constant.446, %constant.447), dimensions={1}, to_apply=%region_24.34, metadata={op_name="jit(compiled_generate_function)/while/body/reduce" stack_frame_id=786}
}
%wrapped_divide_computation (param_0.381: f32[1], param_1.433: f32[1]) -> f32[1] {
  %param_0.381 = f32[1]{0} parameter(0)
  %param_1.433 = f32[1]{0} parameter(1)
  ROOT %divide.32 = f32[1]{0} divide(%param_0.381, %param_1.433), metadata={op_name="jit(compiled_generate_function)/while/body/div" stack_frame_id=138}
}
ENTRY %body (copy_dot_fusion: f32[256000]) -> s32[1] {
  %copy_dot_fusion = f32[256000]{0} parameter(0)
  %constant.409 = f32[] constant(0)
  %constant.415 = f32[] constant(-inf)
  %constant.430 = f32[1]{0} constant({1}), metadata={op_name="jit(compiled_generate_function)/while/body/div" stack_frame_id=138}
  %ynn_fusion.1 = f32[1,256000]{1,0} fusion(%constant.415, %copy_dot_fusion), kind=kCustom, calls=%fused_computation.1, metadata={op_name="jit(compiled_generate_function)/while/body/reduce_max" stack_frame_id=138}, backend_config={"outer_dimension_partitions":[],"fusion_config":{"kind":"__ynn_fusion"}}
  %ynn_fusion = f32[1]{0} fusion(%ynn_fusion.1, %constant.409), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(compiled_generate_function)/while/body/reduce_sum" stack_frame_id=138}, backend_config={"outer_dimension_partitions":[],"fusion_config":{"kind":"__ynn_fusion"}}
  %wrapped_divide = f32[1]{0} fusion(%constant.430, %ynn_fusion), kind=kLoop, calls=%wrapped_divide_computation, metadata={op_name="jit(compiled_generate_function)/while/body/div" stack_frame_id=138}
  %iota_reduce_fusion = (f32[1]{0}, s32[1]{0}) fusion(%ynn_fusion.1, %wrapped_divide), kind=kLoop, calls=%fused_computation.24, metadata={op_name="jit(compiled_generate_function)/while/body/reduce" stack_frame_id=786}
  ROOT %reduce.36 = s32[1]{0} get-tuple-element(%iota_reduce_fusion), index=1, metadata={op_name="jit(compiled_generate_function)/while/body/reduce" stack_frame_id=786}
}
"""

_PROBS_RETURNED = """\
HloModule jit_sample_with_probs, is_scheduled=true, entry_computation_layout={(bf16[8,256000]{1,0}, f32[])->(s32[8]{0}, f32[8,256000]{1,0})}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true,true}
FileNames
1 "<string>"
2 "tests/rules/programs/greedy_softmax.py"
FunctionNames
1 "<module>"
2 "sample_with_probs"
FileLocations
1 {file_name_id=1 function_name_id=1 line=5 end_line=5 column=45 end_column=68}
2 {file_name_id=2 function_name_id=2 line=32 end_line=32 column=12 end_column=77}
3 {file_name_id=2 function_name_id=2 line=33 end_line=33 column=11 end_column=37}
4 {file_name_id=2 function_name_id=2 line=32 end_line=32 column=27 end_column=53}
StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=1}
4 {file_location_id=3 parent_frame_id=4}
5 {file_location_id=4 parent_frame_id=2}
6 {file_location_id=3 parent_frame_id=2}
7 {file_location_id=3 parent_frame_id=7}
%region_1.2 (reduce_sum.3: f32[], reduce_sum.4: f32[]) -> f32[] {
  %reduce_sum.3 = f32[] parameter(0), metadata={op_name="reduce_sum"}
  %reduce_sum.4 = f32[] parameter(1), metadata={op_name="reduce_sum"}
  ROOT %reduce_sum.5 = f32[] add(%reduce_sum.3, %reduce_sum.4), metadata={op_name="jit(sample_with_probs)/reduce_sum" stack_frame_id=2}
}
%fused_computation (param_0: f32[8,256000]) -> f32[8] {
  %param_0 = f32[8,256000]{1,0} parameter(0)
  %constant.4 = f32[] constant(0)
  ROOT %reduce_sum.0 = f32[8]{0} reduce(%param_0, %constant.4), dimensions={1}, to_apply=%region_1.2, metadata={op_name="jit(sample_with_probs)/reduce_sum" stack_frame_id=2}
}
%region_0.1 (reduce_max.3: f32[], reduce_max.4: f32[]) -> f32[] {
  %reduce_max.3 = f32[] parameter(0), metadata={op_name="reduce_max"}
  %reduce_max.4 = f32[] parameter(1), metadata={op_name="reduce_max"}
  ROOT %reduce_max.5 = f32[] maximum(%reduce_max.3, %reduce_max.4), metadata={op_name="jit(sample_with_probs)/reduce_max" stack_frame_id=2}
}
%fused_computation.1 (param_0.2: f32[], param_1.4: bf16[8,256000], param_2.2: f32[]) -> f32[8,256000] {
  %param_1.4 = bf16[8,256000]{1,0} parameter(1)
  %convert_element_type.0 = f32[8,256000]{1,0} convert(%param_1.4), metadata={op_name="jit(sample_with_probs)/convert_element_type" stack_frame_id=5}
  %param_2.2 = f32[] parameter(2)
  %broadcast.5 = f32[8,256000]{1,0} broadcast(%param_2.2), dimensions={}, metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=5}
  %multiply.2 = f32[8,256000]{1,0} multiply(%convert_element_type.0, %broadcast.5), metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=5}
  %param_0.2 = f32[] parameter(0)
  %reduce_max.0 = f32[8]{0} reduce(%multiply.2, %param_0.2), dimensions={1}, to_apply=%region_0.1, metadata={op_name="jit(sample_with_probs)/reduce_max" stack_frame_id=2}
  %sub.0 = f32[8,256000]{1,0} broadcast(%reduce_max.0), dimensions={0}, metadata={op_name="jit(sample_with_probs)/sub" stack_frame_id=2}
  %sub.1 = f32[8,256000]{1,0} subtract(%multiply.2, %sub.0), metadata={op_name="jit(sample_with_probs)/sub" stack_frame_id=2}
  ROOT %exp.0 = f32[8,256000]{1,0} exponential(%sub.1), metadata={op_name="jit(sample_with_probs)/exp" stack_frame_id=2}
}
%region_2.3 (reduce.4: f32[], reduce.5: s32[], reduce.6: f32[], reduce.7: s32[]) -> (f32[], s32[]) {
  %reduce.4 = f32[] parameter(0), metadata={op_name="reduce"}
  %reduce.5 = s32[] parameter(1), metadata={op_name="reduce"}
  %reduce.6 = f32[] parameter(2), metadata={op_name="reduce"}
  %reduce.7 = s32[] parameter(3), metadata={op_name="reduce"}
  %ne.1 = pred[] compare(%reduce.4, %reduce.4), direction=NE, metadata={op_name="ne" stack_frame_id=4}
  %gt.1 = pred[] compare(%reduce.4, %reduce.6), direction=GT, metadata={op_name="gt" stack_frame_id=4}
  %eq.1 = pred[] compare(%reduce.4, %reduce.6), direction=EQ, metadata={op_name="eq" stack_frame_id=4}
  %lt.1 = pred[] compare(%reduce.5, %reduce.7), direction=LT, metadata={op_name="lt" stack_frame_id=4}
  %or.2 = pred[] or(%gt.1, %ne.1), metadata={op_name="or" stack_frame_id=4}
  %and.1 = pred[] and(%eq.1, %lt.1), metadata={op_name="and" stack_frame_id=4}
  %select_n.2 = f32[] select(%or.2, %reduce.4, %reduce.6), metadata={op_name="select_n" stack_frame_id=4}
  %or.3 = pred[] or(%or.2, %and.1), metadata={op_name="or" stack_frame_id=4}
  %select_n.3 = s32[] select(%or.3, %reduce.5, %reduce.7), metadata={op_name="select_n" stack_frame_id=4}
  ROOT %tuple.1 = (f32[], s32[]) tuple(%select_n.2, %select_n.3)
}
%fused_computation.2 (param_0.5: f32[8,256000], param_1.8: f32[8]) -> (f32[8], s32[8]) {
  %param_0.5 = f32[8,256000]{1,0} parameter(0)
  %param_1.8 = f32[8]{0} parameter(1)
  %broadcast.6 = f32[8,256000]{1,0} broadcast(%param_1.8), dimensions={0}, metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=2}
  %multiply.3 = f32[8,256000]{1,0} multiply(%param_0.5, %broadcast.6), metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=2}
  %iota.5 = s32[8,256000]{1,0} iota(), iota_dimension=1, metadata={op_name="jit(sample_with_probs)/iota" stack_frame_id=7}
  %constant.11 = f32[] constant(-inf)
  %constant.10 = s32[] constant(0), metadata={op_name="jit(sample_with_probs)" stack_frame_id=6}
  ROOT %reduce.2 = (f32[8]{0}, s32[8]{0}) reduce(%multiply.3, %iota.5, %constant.11, %constant.10), dimensions={1}, to_apply=%region_2.3, metadata={op_name="jit(sample_with_probs)/reduce" stack_frame_id=7}
}
%fused_computation.3 (param_0.6: f32[8,256000], param_1.10: f32[8]) -> f32[8,256000] {
  %param_0.6 = f32[8,256000]{1,0} parameter(0)
  %param_1.10 = f32[8]{0} parameter(1)
  %broadcast.7 = f32[8,256000]{1,0} broadcast(%param_1.10), dimensions={0}, metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=2}
  ROOT %multiply.4 = f32[8,256000]{1,0} multiply(%param_0.6, %broadcast.7), metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=2}
}
%fused_computation.4 (param_0.8: f32[8]) -> f32[8] {
  %constant.12 = f32[] constant(1), metadata={op_name="temperature"}
  %broadcast.8 = f32[8]{0} broadcast(%constant.12), dimensions={}, metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=2}
  %param_0.8 = f32[8]{0} parameter(0)
  ROOT %divide.2 = f32[8]{0} divide(%broadcast.8, %param_0.8), metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=2}
}
%wrapped_divide_computation (param_0.9: f32[], param_1.13: f32[]) -> f32[] {
  %param_0.9 = f32[] parameter(0)
  %param_1.13 = f32[] parameter(1)
  ROOT %divide.3 = f32[] divide(%param_0.9, %param_1.13), metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=5}
}
ENTRY %main.5 (logits.1: bf16[8,256000], temperature.1: f32[]) -> (s32[8], f32[8,256000]) {
  %logits.1 = bf16[8,256000]{1,0} parameter(0), metadata={op_name="logits"}
  %temperature.1 = f32[] parameter(1), metadata={op_name="temperature"}
  %constant.9 = f32[] constant(-inf)
  %constant.2 = f32[] constant(1), metadata={op_name="temperature"}
  %wrapped_divide = f32[] fusion(%constant.2, %temperature.1), kind=kLoop, calls=%wrapped_divide_computation, metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=5}
  %ynn_fusion.1 = f32[8,256000]{1,0} fusion(%constant.9, %logits.1, %wrapped_divide), kind=kCustom, calls=%fused_computation.1, metadata={op_name="jit(sample_with_probs)/reduce_max" stack_frame_id=2}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  %ynn_fusion = f32[8]{0} fusion(%ynn_fusion.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(sample_with_probs)/reduce_sum" stack_frame_id=2}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  %broadcast_divide_fusion = f32[8]{0} fusion(%ynn_fusion), kind=kLoop, calls=%fused_computation.4, metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=2}
  %broadcast_multiply_fusion = f32[8,256000]{1,0} fusion(%ynn_fusion.1, %broadcast_divide_fusion), kind=kLoop, calls=%fused_computation.3, metadata={op_name="jit(sample_with_probs)/div" stack_frame_id=2}, backend_config={"outer_dimension_partitions":["2"]}
  %iota_reduce_fusion = (f32[8]{0}, s32[8]{0}) fusion(%ynn_fusion.1, %broadcast_divide_fusion), kind=kLoop, calls=%fused_computation.2, metadata={op_name="jit(sample_with_probs)/reduce" stack_frame_id=7}, backend_config={"outer_dimension_partitions":["2"]}
  %reduce.1 = s32[8]{0} get-tuple-element(%iota_reduce_fusion), index=1, metadata={op_name="jit(sample_with_probs)/reduce" stack_frame_id=7}
  ROOT %tuple.3 = (s32[8]{0}, f32[8,256000]{1,0}) tuple(%reduce.1, %broadcast_multiply_fusion)
}
"""


class MonotoneMapBeforeSelection(Rule):
    """A softmax (or another monotone map) computed only for an argmax, argmin or top-k to read.

    What it flags:
        An argmax/argmin (XLA's variadic reduce over (value, iota)), a top-k or a sort-based top-k
        whose selected values are not read (only the indices), reading a strictly increasing map
        of a value, row by row: softmax, log-softmax, ``exp``, ``log``, a ``tanh`` soft cap
        (``c * tanh(x / c)``), a float convert, subtracting a row's max, multiplying or dividing
        by a positive row constant (``x / T``; a temperature parameter is taken as positive), and
        keras' -0.0 tie break before its CPU argmax. The finding names the ops that exist only for
        the map (the max-reduce, the exp+sum fusion, the divide) and the line of its ``exp``
        (else its log, tanh, divide). Not flagged: a map whose values are also read elsewhere
        (probabilities returned or sampled from), a scale fused into the argmax alone, row
        constants that vary along the selected dimension.
    Why it costs:
        ``argmax(softmax(x / T)) == argmax(x)``: the max, the exp, the sum and the divide over the
        whole vocabulary are work whose result the selection does not need. Recoverable: the op-stats
        time of the ops that exist only for the map (not the selection's own reduce); measured on
        XLA:CPU (softmax then argmax against the argmax alone, both in one trace, 8x32000 and
        8x256000, f32 and bf16) the saving was 0.93-1.16x their time. Map work fused into the
        selection's op is its share of the op's instructions per element, reducer included: a
        transcendental (``exp``, ``log``, ``tanh``) counts two, a rounding convert one, a multiply by
        1/sum or by a cap nothing (``hlo_doctor.hlo.selection_cost.fused_share`` has the figures it
        was set from). Map work fused into the op computing the logits (a matmul with the
        softmax's max and exp) is weighted the same way, per element, against the selection's
        instructions, with the selection op's time as the unit (a rough figure: the selection
        reads every element once as well).
    Example:
        keras-hub's greedy sampler: ``probabilities = softmax(logits / temperature)`` then
        ``argmax(probabilities)``: 5.7 ms (7%) of an 81 ms step at vocab 256000 (XLA:CPU).
    Fix:
        Take argmax of the logits directly (``argmax(softmax(x/T)) == argmax(x)``); keep softmax
        only where probabilities are returned (likewise a soft cap or log-softmax).
    """

    code = "HD011"
    name = "select.monotone-map-before-selection"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = "argmax-without-softmax"

    VALID = (
        Example(hlo=(_PROBS_RETURNED,), note="tests/rules/programs/greedy_softmax.py sample_with_probs: the "
                "probabilities are returned too"),
        Example(hlo=(ARGMAX_F32_TOKENS,), note="argmax of the logits themselves"),
    )
    INVALID = (
        Example(hlo=(_KERAS_HUB_SAMPLER,), expect=("HD011 ynn_fusion.1",),
                note="keras-hub's greedy sampler: softmax(logits / temperature), then argmax"),
        Example(
            hlo=(_KERAS_HUB_SAMPLER,),
            opstats=tuple({"module": "jit_compiled_generate_function", "op": op, "occurrences": 48,
                           "time_per_step_us": us} for op, us in (
                ("ynn_fusion.1", 4053.156), ("ynn_fusion", 1634.355), ("wrapped_divide", 22.766),
                ("iota_reduce_fusion", 17239.615))),
            step_time_us=81189.1, num_steps=3, expect=("HD011 ynn_fusion.1",),
            note="with the capture's op stats: the max+exp, sum and divide ops, 5.71 ms of 81.2",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            for found in monotone_maps(m):
                yield self._finding(ctx, m, found)

    def _finding(self, ctx: Context, m: HloModule, mm: MonotoneMap) -> Finding:
        timed = {op.name: t.time_per_step_us for op in mm.ops if (t := ctx.op_timing(m, op.name)) is not None}
        measured = sum(timed.values())
        share = fused_share(m, mm)
        sel = ctx.op_timing(m, mm.selection_op.name)
        fused_us = share * sel.time_per_step_us if sel is not None else 0.0
        source_us = source_share(m, mm) * sel.time_per_step_us if sel is not None else 0.0
        src = ctx.op_timing(m, ctx.entry_op(m, mm.source_op).name) if mm.in_source else None
        # The op shown: the costliest op that exists only for the map; else the op holding it.
        ops = sorted(mm.ops, key=lambda o: (timed.get(o.name, 0.0), o.shape.nbytes), reverse=True)
        inst = ops[0] if ops else (mm.source_op if mm.in_source else mm.selection_op)
        line_inst = line_instruction(m, mm)
        origin = origin_of(m, line_inst)
        where = origin.where()
        what = ", ".join(o.name for o in mm.ops) or "none of its own"
        inside = []
        if share:
            inside.append(f"{sum(1 for s in mm.fused if is_map_work(s))} instruction(s) fused into "
                          f"{mm.selection_op.name}")
        if mm.in_source:
            inside.append(f"{len(mm.in_source)} fused into {mm.source_op.name}, which computes the input")
        message = (f"{mm.kind} in {mm.selection_op.name} reads {describe(mm)} of {mm.source_op.name} "
                   f"({dtype_shape(mm.source.shape)}); the selection does not depend on it. Ops that exist "
                   f"only for it: {what}" + (f"; also {' and '.join(inside)}" if inside else "")
                   + (f"; the map is {where}" if where else "") + f". Fix: {fix_text(mm)}")
        stage = stage_of(m, ctx.origin)
        evidence = [s.raw for s in mm.steps[:4]] + [mm.selection.raw]
        if not stage.optimized:
            evidence.append(stage.evidence())
        has_time = bool(timed) or sel is not None
        return ctx.finding(
            self, m, inst, message, source_inst=line_inst, evidence=tuple(evidence),
            fix="" if origin.framework else None,
            # Every part is op time: the map's own ops, and the shares of the selection and of the
            # input's fusion that compute it (each no more than those ops take).
            parts=bounded(ctx, op=measured + fused_us + source_us, op_bound=measured + (
                sel.time_per_step_us if sel is not None else 0.0) + (src.time_per_step_us if src is not None else source_us))
            if has_time else None,
            severity=None if stage.optimized else Severity.LOW,
            extra=(("selection", mm.kind), ("selection_op", mm.selection_op.name),
                   ("map_ops", [o.name for o in mm.ops]), ("map_ops_us", round(measured, 3)),
                   ("fused_in_selection_share", round(share, 4)), ("fused_in_selection_us", round(fused_us, 3)),
                   ("fused_in_source_us", round(source_us, 3)), ("input", dtype_shape(mm.source.shape))),
        )
