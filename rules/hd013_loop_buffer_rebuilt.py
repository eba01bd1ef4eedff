"""HD013: a loop-carried buffer cut into pieces and put back together on every iteration of a ``while``."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.analysis import dtype_shape
from hlo_doctor.hlo.loops import CarriedFlow, loop_rebuilds
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes, stage_of
from hlo_doctor.lint.parts import bounded

# XLA:CPU (jax 0.10.2) compiling ``decode.py``: ``rebuild`` slices each of two layers out of a stacked
# f32[2,64,32] cache, updates one row of each (``dynamic_update_slice``) and ``jnp.stack``s them back, in a
# ``fori_loop`` of 8 iterations. Slices, updates and the stack are one fusion rooted at the concatenate
# (written whole), and the body copies its result into the loop state once more.
_REBUILT = """\
HloModule jit_rebuild, is_scheduled=true, entry_computation_layout={(f32[2,64,32]{2,1,0}, f32[1,32]{1,0})->f32[2,64,32]{2,1,0}}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true}
FileNames
1 "decode.py"
FunctionNames
1 "rebuild.<locals>.body"
2 "rebuild.<locals>.body.<locals>.<listcomp>"
3 "<module>"
4 "rebuild"
FileLocations
1 {file_name_id=1 function_name_id=1 line=8 end_line=8 column=17 end_column=88}
2 {file_name_id=1 function_name_id=2 line=8 end_line=8 column=47 end_column=55}
3 {file_name_id=1 function_name_id=2 line=8 end_line=8 column=18 end_column=69}
4 {file_name_id=1 function_name_id=1 line=9 end_line=9 column=15 end_column=32}
5 {file_name_id=1 function_name_id=3 line=29 end_line=29 column=6 end_column=73}
6 {file_name_id=1 function_name_id=4 line=10 end_line=10 column=11 end_column=47}
StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=2}
4 {file_location_id=4 parent_frame_id=1}
5 {file_location_id=5 parent_frame_id=1}
6 {file_location_id=6 parent_frame_id=6}
7 {file_location_id=6 parent_frame_id=7}
8 {file_location_id=6 parent_frame_id=8}
9 {file_location_id=1 parent_frame_id=9}
10 {file_location_id=2 parent_frame_id=10}
11 {file_location_id=3 parent_frame_id=10}
12 {file_location_id=4 parent_frame_id=9}
%fused_computation (param_0.2: f32[2,64,32], param_1.6: s32[], param_2.6: f32[1,32]) -> f32[2,64,32] {
  %param_0.2 = f32[2,64,32]{2,1,0} parameter(0)
  %slice.11 = f32[1,64,32]{2,1,0} slice(%param_0.2), slice={[0:1], [0:64], [0:32]}, metadata={op_name="jit(rebuild)/while/body/closed_call/slice" stack_frame_id=10}
  %param_2.6 = f32[1,32]{1,0} parameter(2)
  %bitcast.1 = f32[1,1,32]{2,1,0} bitcast(%param_2.6), metadata={op_name="jit(rebuild)/while/body/closed_call/stack" stack_frame_id=12}
  %constant.31 = s32[] constant(0), metadata={op_name="jit(rebuild)/while/body/closed_call" stack_frame_id=8}
  %param_1.6 = s32[] parameter(1)
  %lt.13 = pred[] compare(%param_1.6, %constant.31), direction=LT, metadata={op_name="jit(rebuild)/while/body/closed_call/lt" stack_frame_id=11}
  %constant.30 = s32[] constant(64), metadata={op_name="jit(rebuild)/while/body/closed_call" stack_frame_id=8}
  %add.22 = s32[] add(%param_1.6, %constant.30), metadata={op_name="jit(rebuild)/while/body/closed_call/add" stack_frame_id=11}
  %select_n.10 = s32[] select(%lt.13, %add.22, %param_1.6), metadata={op_name="jit(rebuild)/while/body/closed_call/select_n" stack_frame_id=11}
  %dynamic_update_slice.13 = f32[1,64,32]{2,1,0} dynamic-update-slice(%slice.11, %bitcast.1, %constant.31, %select_n.10, %constant.31), metadata={op_name="jit(rebuild)/while/body/closed_call/dynamic_update_slice" stack_frame_id=11}
  %slice.10 = f32[1,64,32]{2,1,0} slice(%param_0.2), slice={[1:2], [0:64], [0:32]}, metadata={op_name="jit(rebuild)/while/body/closed_call/slice" stack_frame_id=10}
  %dynamic_update_slice.12 = f32[1,64,32]{2,1,0} dynamic-update-slice(%slice.10, %bitcast.1, %constant.31, %select_n.10, %constant.31), metadata={op_name="jit(rebuild)/while/body/closed_call/dynamic_update_slice" stack_frame_id=11}
  ROOT %stack.9 = f32[2,64,32]{2,1,0} concatenate(%dynamic_update_slice.13, %dynamic_update_slice.12), dimensions={0}, metadata={op_name="jit(rebuild)/while/body/closed_call/stack" stack_frame_id=12}
}
%wrapped_add_computation (param_0.3: s32[], param_1.7: s32[]) -> s32[] {
  %param_0.3 = s32[] parameter(0)
  %param_1.7 = s32[] parameter(1)
  ROOT %add.23 = s32[] add(%param_0.3, %param_1.7), metadata={op_name="jit(rebuild)/while/body/add" stack_frame_id=8}
}
%region_0.2.clone.clone.clone (arg_tuple.6: (s32[], f32[2,64,32], f32[1,32])) -> (s32[], f32[2,64,32], f32[1,32]) {
  %arg_tuple.6 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) parameter(0)
  %constant.25 = s32[] constant(1)
  %get-tuple-element.58 = f32[1,32]{1,0} get-tuple-element(%arg_tuple.6), index=2
  %get-tuple-element.54 = f32[2,64,32]{2,1,0} get-tuple-element(%arg_tuple.6), index=1
  %get-tuple-element.53 = s32[] get-tuple-element(%arg_tuple.6), index=0
  %copy.2 = s32[] copy(%get-tuple-element.53)
  %dynamic-update-slice_concatenate_fusion = f32[2,64,32]{2,1,0} fusion(%get-tuple-element.54, %copy.2, %get-tuple-element.58), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(rebuild)/while/body/closed_call/stack" stack_frame_id=12}
  %wrapped_add = s32[] fusion(%copy.2, %constant.25), kind=kLoop, calls=%wrapped_add_computation, metadata={op_name="jit(rebuild)/while/body/add" stack_frame_id=8}
  %copy.5 = f32[2,64,32]{2,1,0} copy(%dynamic-update-slice_concatenate_fusion)
  ROOT %tuple.14 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) tuple(%wrapped_add, %copy.5, %get-tuple-element.58)
}
%wrapped_compare_computation (param_0.4: s32[], param_1.8: s32[]) -> pred[] {
  %param_0.4 = s32[] parameter(0)
  %param_1.8 = s32[] parameter(1)
  ROOT %lt.14 = pred[] compare(%param_0.4, %param_1.8), direction=LT, metadata={op_name="jit(rebuild)/while/cond/lt" stack_frame_id=8}
}
%region_1.3.clone.clone (arg_tuple.5: (s32[], f32[2,64,32], f32[1,32])) -> pred[] {
  %arg_tuple.5 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) parameter(0)
  %constant.24 = s32[] constant(8)
  %get-tuple-element.41 = s32[] get-tuple-element(%arg_tuple.5), index=0
  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.41, %constant.24), kind=kLoop, calls=%wrapped_compare_computation, metadata={op_name="jit(rebuild)/while/cond/lt" stack_frame_id=8}
}
ENTRY %main.4 (cache.1: f32[2,64,32], row.1: f32[1,32]) -> f32[2,64,32] {
  %cache.1 = f32[2,64,32]{2,1,0} parameter(0), metadata={op_name="cache"}
  %row.1 = f32[1,32]{1,0} parameter(1), metadata={op_name="row"}
  %constant.11 = s32[] constant(0)
  %copy.6 = f32[2,64,32]{2,1,0} copy(%cache.1)
  %copy.7 = s32[] copy(%constant.11)
  %tuple.12 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) tuple(%copy.7, %copy.6, %row.1)
  %while.1 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) while(%tuple.12), condition=%region_1.3.clone.clone, body=%region_0.2.clone.clone.clone, metadata={op_name="jit(rebuild)/while" stack_frame_id=7}, backend_config={"dynamic_variables":[],"known_induction_variable":{"tuple_index":"0"},"known_init_step":{"init":"0","step":"1"},"known_trip_count":{"n":"8"}}
  ROOT %while.9 = f32[2,64,32]{2,1,0} get-tuple-element(%while.1), index=1, metadata={op_name="jit(rebuild)/while" stack_frame_id=7}
}
"""

# The same loop updating the stacked cache in place (one ``dynamic_update_slice`` per layer), printed by
# XLA:CPU without the source tables.
_IN_PLACE = """\
HloModule jit_in_place, is_scheduled=true, entry_computation_layout={(f32[2,64,32]{2,1,0}, f32[1,32]{1,0})->f32[2,64,32]{2,1,0}}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true}
%fused_computation (param_0: f32[2,64,32], param_1.2: s32[], param_2.2: f32[1,32]) -> f32[2,64,32] {
  %param_0 = f32[2,64,32]{2,1,0} parameter(0)
  %param_2.2 = f32[1,32]{1,0} parameter(2)
  %bitcast.1 = f32[1,1,32]{2,1,0} bitcast(%param_2.2), metadata={op_name="jit(in_place)/while/body/closed_call/broadcast_in_dim" stack_frame_id=7}
  %constant.24 = s32[] constant(1)
  %param_1.2 = s32[] parameter(1)
  %constant.23 = s32[] constant(0), metadata={op_name="jit(in_place)/while/body/closed_call" stack_frame_id=6}
  ROOT %dynamic_update_slice.10 = f32[2,64,32]{2,1,0} dynamic-update-slice(%param_0, %bitcast.1, %constant.24, %param_1.2, %constant.23), metadata={op_name="jit(in_place)/while/body/closed_call/dynamic_update_slice" stack_frame_id=8}
}
%fused_computation.1 (param_0.1: f32[2,64,32], param_1.5: s32[], param_2.5: f32[1,32]) -> f32[2,64,32] {
  %param_0.1 = f32[2,64,32]{2,1,0} parameter(0)
  %param_2.5 = f32[1,32]{1,0} parameter(2)
  %bitcast.2 = f32[1,1,32]{2,1,0} bitcast(%param_2.5), metadata={op_name="jit(in_place)/while/body/closed_call/broadcast_in_dim" stack_frame_id=7}
  %constant.25 = s32[] constant(0), metadata={op_name="jit(in_place)/while/body/closed_call" stack_frame_id=6}
  %param_1.5 = s32[] parameter(1)
  ROOT %dynamic_update_slice.11 = f32[2,64,32]{2,1,0} dynamic-update-slice(%param_0.1, %bitcast.2, %constant.25, %param_1.5, %constant.25), metadata={op_name="jit(in_place)/while/body/closed_call/dynamic_update_slice" stack_frame_id=8}
}
%fused_computation.2 (param_0.3: s32[]) -> s32[] {
  %param_0.3 = s32[] parameter(0)
  %constant.27 = s32[] constant(0), metadata={op_name="jit(in_place)/while/body/closed_call" stack_frame_id=6}
  %lt.13 = pred[] compare(%param_0.3, %constant.27), direction=LT, metadata={op_name="jit(in_place)/while/body/closed_call/lt" stack_frame_id=8}
  %constant.26 = s32[] constant(64), metadata={op_name="jit(in_place)/while/body/closed_call" stack_frame_id=6}
  %add.22 = s32[] add(%param_0.3, %constant.26), metadata={op_name="jit(in_place)/while/body/closed_call/add" stack_frame_id=8}
  ROOT %select_n.10 = s32[] select(%lt.13, %add.22, %param_0.3), metadata={op_name="jit(in_place)/while/body/closed_call/select_n" stack_frame_id=8}
}
%wrapped_add_computation (param_0.4: s32[], param_1.9: s32[]) -> s32[] {
  %param_0.4 = s32[] parameter(0)
  %param_1.9 = s32[] parameter(1)
  ROOT %add.23 = s32[] add(%param_0.4, %param_1.9), metadata={op_name="jit(in_place)/while/body/add" stack_frame_id=6}
}
%region_0.2.clone.clone.clone (arg_tuple.6: (s32[], f32[2,64,32], f32[1,32])) -> (s32[], f32[2,64,32], f32[1,32]) {
  %arg_tuple.6 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) parameter(0), metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  %constant.19 = s32[] constant(1), metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  %get-tuple-element.58 = f32[1,32]{1,0} get-tuple-element(%arg_tuple.6), index=2, metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  %get-tuple-element.54 = f32[2,64,32]{2,1,0} get-tuple-element(%arg_tuple.6), index=1, metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  %get-tuple-element.53 = s32[] get-tuple-element(%arg_tuple.6), index=0, metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  %copy.4 = s32[] copy(%get-tuple-element.53), metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  %add_select_fusion = s32[] fusion(%copy.4), kind=kLoop, calls=%fused_computation.2, metadata={op_name="jit(in_place)/while/body/closed_call/select_n" stack_frame_id=8}
  %wrapped_add = s32[] fusion(%copy.4, %constant.19), kind=kLoop, calls=%wrapped_add_computation, metadata={op_name="jit(in_place)/while/body/add" stack_frame_id=6}
  %bitcast_dynamic-update-slice_fusion.1 = f32[2,64,32]{2,1,0} fusion(%get-tuple-element.54, %add_select_fusion, %get-tuple-element.58), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(in_place)/while/body/closed_call/dynamic_update_slice" stack_frame_id=8}
  %bitcast_dynamic-update-slice_fusion = f32[2,64,32]{2,1,0} fusion(%bitcast_dynamic-update-slice_fusion.1, %add_select_fusion, %get-tuple-element.58), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(in_place)/while/body/closed_call/dynamic_update_slice" stack_frame_id=8}
  ROOT %tuple.14 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) tuple(%wrapped_add, %bitcast_dynamic-update-slice_fusion, %get-tuple-element.58), metadata={op_name="jit(in_place)/while" stack_frame_id=5}
}
%wrapped_compare_computation (param_0.5: s32[], param_1.10: s32[]) -> pred[] {
  %param_0.5 = s32[] parameter(0)
  %param_1.10 = s32[] parameter(1)
  ROOT %lt.14 = pred[] compare(%param_0.5, %param_1.10), direction=LT, metadata={op_name="jit(in_place)/while/cond/lt" stack_frame_id=6}
}
%region_1.3.clone.clone (arg_tuple.5: (s32[], f32[2,64,32], f32[1,32])) -> pred[] {
  %arg_tuple.5 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) parameter(0), metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  %constant.18 = s32[] constant(8), metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  %get-tuple-element.41 = s32[] get-tuple-element(%arg_tuple.5), index=0, metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.41, %constant.18), kind=kLoop, calls=%wrapped_compare_computation, metadata={op_name="jit(in_place)/while/cond/lt" stack_frame_id=6}
}
%while.1_computation (tuple.15: (s32[], f32[2,64,32], f32[1,32])) -> (s32[], f32[2,64,32], f32[1,32]) {
  %tuple.15 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) parameter(0), metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  ROOT %while.2 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) while(%tuple.15), condition=%region_1.3.clone.clone, body=%region_0.2.clone.clone.clone, metadata={op_name="jit(in_place)/while" stack_frame_id=5}, backend_config={"dynamic_variables":[],"known_induction_variable":{"tuple_index":"0"},"known_init_step":{"init":"0","step":"1"},"known_trip_count":{"n":"8"}}
}
ENTRY %main.4 (cache.1: f32[2,64,32], row.1: f32[1,32]) -> f32[2,64,32] {
  %cache.1 = f32[2,64,32]{2,1,0} parameter(0), metadata={op_name="cache"}
  %row.1 = f32[1,32]{1,0} parameter(1), metadata={op_name="row"}
  %constant.11 = s32[] constant(0)
  %copy.8 = f32[2,64,32]{2,1,0} copy(%cache.1)
  %copy.9 = s32[] copy(%constant.11)
  %tuple.12 = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) tuple(%copy.9, %copy.8, %row.1)
  %call = (s32[], f32[2,64,32]{2,1,0}, f32[1,32]{1,0}) call(%tuple.12), to_apply=%while.1_computation, frontend_attributes={xla_cpu_small_call="true"}, metadata={op_name="jit(in_place)/while" stack_frame_id=5}
  ROOT %while.9 = f32[2,64,32]{2,1,0} get-tuple-element(%call), index=1, metadata={op_name="jit(in_place)/while" stack_frame_id=5}
}
"""

# A sliding window (``concatenate([cache[:, 1:], rows], axis=1)``): every position moves, the whole
# buffer differs from the incoming one. Printed by XLA:CPU without the source tables.
_SHIFT = """\
HloModule jit_shift, is_scheduled=true, entry_computation_layout={(f32[2,64,32]{2,1,0}, f32[1,32]{1,0})->f32[2,64,32]{2,1,0}}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true}
%fused_computation (param_0.1: f32[2,1,32], param_1.1: f32[2,64,32]) -> f32[2,64,32] {
  %param_1.1 = f32[2,64,32]{2,1,0} parameter(1)
  %slice.4 = f32[2,63,32]{2,1,0} slice(%param_1.1), slice={[0:2], [1:64], [0:32]}, metadata={op_name="jit(shift)/while/body/closed_call/slice" stack_frame_id=8}
  %param_0.1 = f32[2,1,32]{2,1,0} parameter(0)
  ROOT %concatenate.4 = f32[2,64,32]{2,1,0} concatenate(%slice.4, %param_0.1), dimensions={1}, metadata={op_name="jit(shift)/while/body/closed_call/concatenate" stack_frame_id=10}
}
%wrapped_add_computation (param_0.4: s32[], param_1.2: s32[]) -> s32[] {
  %param_0.4 = s32[] parameter(0)
  %param_1.2 = s32[] parameter(1)
  ROOT %add.3 = s32[] add(%param_0.4, %param_1.2), metadata={op_name="jit(shift)/while/body/add" stack_frame_id=7}
}
%wide.region_0.2.clone (wide.arg_tuple.2: (s32[], f32[2,64,32], f32[2,1,32])) -> (s32[], f32[2,64,32], f32[2,1,32]) {
  %wide.arg_tuple.2 = (s32[], f32[2,64,32]{2,1,0}, f32[2,1,32]{2,1,0}) parameter(0)
  %constant.7 = s32[] constant(1)
  %get-tuple-element.37 = f32[2,1,32]{2,1,0} get-tuple-element(%wide.arg_tuple.2), index=2
  %get-tuple-element.33 = f32[2,64,32]{2,1,0} get-tuple-element(%wide.arg_tuple.2), index=1
  %get-tuple-element.32 = s32[] get-tuple-element(%wide.arg_tuple.2), index=0
  %slice_concatenate_fusion = f32[2,64,32]{2,1,0} fusion(%get-tuple-element.37, %get-tuple-element.33), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(shift)/while/body/closed_call/concatenate" stack_frame_id=10}
  %wrapped_add = s32[] fusion(%get-tuple-element.32, %constant.7), kind=kLoop, calls=%wrapped_add_computation, metadata={op_name="jit(shift)/while/body/add" stack_frame_id=7}
  %copy.5 = f32[2,64,32]{2,1,0} copy(%slice_concatenate_fusion)
  ROOT %tuple.10 = (s32[], f32[2,64,32]{2,1,0}, f32[2,1,32]{2,1,0}) tuple(%wrapped_add, %copy.5, %get-tuple-element.37)
}
%wrapped_compare_computation (param_0.5: s32[], param_1.3: s32[]) -> pred[] {
  %param_0.5 = s32[] parameter(0)
  %param_1.3 = s32[] parameter(1)
  ROOT %lt.3 = pred[] compare(%param_0.5, %param_1.3), direction=LT, metadata={op_name="jit(shift)/while/cond/lt" stack_frame_id=7}
}
%wide.region_1.3.clone (wide.arg_tuple.0: (s32[], f32[2,64,32], f32[2,1,32])) -> pred[] {
  %wide.arg_tuple.0 = (s32[], f32[2,64,32]{2,1,0}, f32[2,1,32]{2,1,0}) parameter(0)
  %constant.6 = s32[] constant(8)
  %get-tuple-element.20 = s32[] get-tuple-element(%wide.arg_tuple.0), index=0
  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.20, %constant.6), kind=kLoop, calls=%wrapped_compare_computation, metadata={op_name="jit(shift)/while/cond/lt" stack_frame_id=7}
}
%fused_computation.1 (param_0.3: f32[1,32]) -> f32[2,1,32] {
  %param_0.3 = f32[1,32]{1,0} parameter(0)
  %bitcast.1 = f32[1,1,32]{2,1,0} bitcast(%param_0.3), metadata={op_name="row"}
  ROOT %stack.12 = f32[2,1,32]{2,1,0} concatenate(%bitcast.1, %bitcast.1), dimensions={0}, metadata={op_name="jit(shift)/while/body/closed_call/stack" stack_frame_id=9}
}
ENTRY %main.4 (cache.1: f32[2,64,32], row.1: f32[1,32]) -> f32[2,64,32] {
  %cache.1 = f32[2,64,32]{2,1,0} parameter(0), metadata={op_name="cache"}
  %row.1 = f32[1,32]{1,0} parameter(1), metadata={op_name="row"}
  %constant.5 = s32[] constant(0)
  %copy.6 = f32[2,64,32]{2,1,0} copy(%cache.1)
  %bitcast_concatenate_fusion = f32[2,1,32]{2,1,0} fusion(%row.1), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(shift)/while/body/closed_call/stack" stack_frame_id=9}
  %copy.7 = s32[] copy(%constant.5)
  %tuple.8 = (s32[], f32[2,64,32]{2,1,0}, f32[2,1,32]{2,1,0}) tuple(%copy.7, %copy.6, %bitcast_concatenate_fusion)
  %while.1 = (s32[], f32[2,64,32]{2,1,0}, f32[2,1,32]{2,1,0}) while(%tuple.8), condition=%wide.region_1.3.clone, body=%wide.region_0.2.clone, metadata={op_name="jit(shift)/while" stack_frame_id=6}, backend_config={"dynamic_variables":[],"known_induction_variable":{"tuple_index":"0"},"known_init_step":{"init":"0","step":"1"},"known_trip_count":{"n":"8"}}
  ROOT %while.7 = f32[2,64,32]{2,1,0} get-tuple-element(%while.1), index=1, metadata={op_name="jit(shift)/while" stack_frame_id=6}
}
"""


class LoopBufferRebuilt(Rule):
    """A loop-carried buffer written whole on every iteration of a ``while`` when only a slice of it changes.

    What it flags:
        An element of a ``while`` loop's state (4 KiB or more) that the body returns built from the
        incoming element by data movement alone: it is cut into pieces (slices), a few rows are
        updated (``dynamic-update-slice``), and the pieces are put back together (``concatenate``,
        the stack of ``jnp.stack``), every piece at its old position, so that what the body returns
        differs from what it received only in the updates (at most a quarter of the element), while
        the ops on the way write at least the whole element per iteration. Fused or not: the slices,
        updates and the concatenate may be one fusion rooted at the concatenate, separate slice,
        copy and update fusions, or start with a plain ``copy`` of the incoming element. A keras-hub
        style decode loop does this to its KV cache: ``cache[:, i]`` per layer, an update at the new
        position, ``ops.stack(caches, axis=1)``. Not flagged: a buffer updated in place (a
        ``dynamic-update-slice`` into the incoming buffer), a window whose contents move (a
        ``concatenate([cache[:, 1:], new])``: every byte differs), and a lone copy of the element
        (HD010's). Only optimized modules are read: XLA's passes decide what is written in place.
    Why it costs:
        The whole buffer is read and written (often several times: slices, copies, the re-stack) for
        every token, where the update writes one row: keras-hub's Gemma with a 1,024-token cache
        spends ~12% of its generate() step (XLA:CPU) re-stacking it. The finding gives the bytes written per iteration against the bytes that
        differ, the iterations per step, and sizes the rebuild as the time of every op in the body
        that only moves the buffer's pieces (its slices, copies, updates and the re-stack). Where the
        compiler updates the buffer's type in a wider one (XLA:CPU's bf16: a ``convert`` around the
        update), an in-place update would also write the buffer whole: no time is counted there.
    Example:
        ``caches = [lax.dynamic_update_slice(cache[i], row, (t, 0)) for i in range(2)];
        return jnp.stack(caches)`` in a ``fori_loop`` body: one fusion rooted at ``concatenate``
        writes f32[2,64,32] (16 KiB) and a copy moves it into the loop state, 32 KiB written per
        iteration where 256 bytes differ.
    Fix:
        Keep the cache as one stacked buffer and update it with one ``lax.dynamic_update_slice``
        (or ``.at[...].set``) at the new position, indexing each layer's slice for reading only
        (``cache = lax.dynamic_update_slice(cache, kv[:, None], (0, i, 0, t, 0, 0))``, then read
        ``cache[:, i]``); donate the state when the loop is the program's output
        (``donate_argnums``), so that the loop updates the caller's buffer.
    """

    code = "HD013"
    name = "loop.buffer-rebuilt-per-iteration"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = ""

    VALID = (
        Example(hlo=(_IN_PLACE,), note="decode.py in_place: one update per layer of the stacked cache"),
        Example(hlo=(_SHIFT,), note="decode.py shift: a sliding window, every position moves"),
    )
    INVALID = (
        Example(hlo=(_REBUILT,), expect=("HD013 dynamic-update-slice_concatenate_fusion",),
                note="decode.py rebuild: slices, updates and the stack in one fusion"),
        Example(
            hlo=(_REBUILT,),
            opstats=({"module": "jit_rebuild", "op": "dynamic-update-slice_concatenate_fusion",
                      "occurrences": 32, "time_per_step_us": 40.0, "category": "data-movement"},
                     {"module": "jit_rebuild", "op": "copy.5", "occurrences": 32, "time_per_step_us": 12.0,
                      "category": "copy"},
                     {"module": "jit_rebuild", "op": "while.1", "occurrences": 4, "time_per_step_us": 60.0}),
            step_time_us=200.0, num_steps=4, expect=("HD013 dynamic-update-slice_concatenate_fusion",),
            note="with op stats: 8 iterations per step, the fusion and the copy after it (52 us of 200)",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            if not stage_of(m, ctx.origin).optimized:
                continue  # XLA's passes decide what is updated in place and what is written whole
            for flow in loop_rebuilds(m):
                yield self._finding(ctx, m, flow)

    def _finding(self, ctx: Context, m: HloModule, flow: CarriedFlow) -> Finding:
        op = flow.assembler or flow.writer or flow.chain[-1]
        size = flow.element.nbytes
        message = (f"{op.name} rebuilds loop-carried element {flow.index} of {flow.loop.name} "
                   f"({dtype_shape(flow.element)}, {fmt_bytes(size)}) on every iteration: the body cuts it "
                   f"into pieces and puts them back together ({len(flow.movement)} ops), writing "
                   f"{fmt_bytes(flow.bytes_written)} per iteration where {fmt_bytes(flow.bytes_differ)} "
                   f"differ from the incoming element")
        timings = [t for t in (ctx.op_timing(m, o.name) for o in flow.movement) if t is not None]
        chain_us = sum(t.time_per_step_us for t in timings)
        own = ctx.op_timing(m, op.name)
        iterations = own.occurrences_per_device / ctx.num_steps if own is not None and ctx.num_steps else 0.0
        if iterations:
            message += f"; {iterations:.0f} iterations per step, {chain_us:.1f} us per step in the rebuild"
        recoverable: float | None = chain_us if timings else None
        if flow.widened_updates:
            recoverable = 0.0 if timings else None
            message += (f"; this compiler updates {flow.element.dtype} buffers in a wider type and converts "
                        f"them back whole, so an in-place update would also write it whole: no time counted")
        else:
            message += ("; update the stacked buffer in place (one dynamic_update_slice at the new position) "
                        "and read each layer's slice from it")
        source = flow.joins[0] if flow.joins and flow.joins[0].source else None
        return ctx.finding(
            self, m, op, message, source_inst=source,
            parts=bounded(ctx, op=recoverable, op_bound=chain_us) if recoverable is not None else None,
            evidence=(op.raw, flow.loop.raw),
            extra=(("loop", flow.loop.name), ("tuple_index", flow.index),
                   ("bytes_written", flow.bytes_written), ("bytes_differ", flow.bytes_differ),
                   ("iterations_per_step", iterations),
                   ("ops", tuple(o.name for o in flow.movement)), ("ops_us", chain_us)),
        )
