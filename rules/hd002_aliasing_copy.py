"""HD002: a copy of an entry parameter that is returned (copy insertion, no donation)."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloInstruction, HloModule
from hlo_doctor.hlo.analysis import dtype_shape, entry_parameter_of, is_argmax_program
from hlo_doctor.hlo.navigation import async_copies_before
from hlo_doctor.hlo.origin import origin_of, staging_cause
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes, stage_of
from hlo_doctor.lint.parts import bounded
from hlo_doctor.lint.runtime_gaps import runtime_gaps
from hlo_doctor.lint.testing import ARGMAX_REDUCER

_RETURNS_INPUT = """\
HloModule jit_sample, entry_computation_layout={(f32[8,1024]{1,0})->(s32[8]{0}, f32[8,1024]{1,0})}

""" + ARGMAX_REDUCER + """
%fused_computation (param_0: f32[8,1024]) -> (f32[8], s32[8]) {
  %param_0 = f32[8,1024]{1,0} parameter(0)
  %iota.5 = s32[8,1024]{1,0} iota(), iota_dimension=1
  %constant.5 = f32[] constant(-inf)
  %constant.4 = s32[] constant(0)
  ROOT %reduce.2 = (f32[8]{0}, s32[8]{0}) reduce(%param_0, %iota.5, %constant.5, %constant.4), dimensions={1}, to_apply=%region_0.1
}

ENTRY %main.3 (logits.1: f32[8,1024]) -> (s32[8], f32[8,1024]) {
  %logits.1 = f32[8,1024]{1,0} parameter(0), metadata={op_name="logits"}
  %iota_reduce_fusion = (f32[8]{0}, s32[8]{0}) fusion(%logits.1), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(sample)/reduce" source_file="sampling.py" source_line=125}
  %copy = f32[8,1024]{1,0} copy(%logits.1)
  %gte = s32[8]{0} get-tuple-element(%iota_reduce_fusion), index=1
  ROOT %tuple = (s32[8]{0}, f32[8,1024]{1,0}) tuple(%gte, %copy)
}
"""

_IDENTITY = """\
HloModule jit_identity, entry_computation_layout={(f32[64,64]{1,0})->f32[64,64]{1,0}}

ENTRY %main.1 (x.1: f32[64,64]) -> f32[64,64] {
  %x.1 = f32[64,64]{1,0} parameter(0)
  ROOT %copy.1 = f32[64,64]{1,0} copy(%x.1)
}
"""

_DONATED = """\
HloModule jit_step, is_scheduled=true, input_output_alias={ {}: (0, {}, may-alias) }, entry_computation_layout={(f32[64,64]{1,0})->f32[64,64]{1,0}}

ENTRY %main.1 (x.1: f32[64,64]) -> f32[64,64] {
  %x.1 = f32[64,64]{1,0} parameter(0)
  ROOT %copy.1 = f32[64,64]{1,0} copy(%x.1)
}
"""

_TRANSPOSING_COPY = """\
HloModule jit_t, entry_computation_layout={(f32[64,64]{1,0})->f32[64,64]{0,1}}

ENTRY %main.1 (x.1: f32[64,64]) -> f32[64,64] {
  %x.1 = f32[64,64]{1,0} parameter(0)
  ROOT %copy.1 = f32[64,64]{0,1} copy(%x.1)
}
"""

_COPY_NOT_RETURNED = """\
HloModule jit_c, entry_computation_layout={(f32[64,64]{1,0})->f32[64,64]{1,0}}

ENTRY %main.1 (x.1: f32[64,64]) -> f32[64,64] {
  %x.1 = f32[64,64]{1,0} parameter(0)
  %copy.1 = f32[64,64]{1,0} copy(%x.1)
  ROOT %n = f32[64,64]{1,0} negate(%copy.1)
}
"""


# Below this a copy is noise (scalars, small metadata arrays) next to the step's real work.
MIN_BYTES = 4096

_SCALAR = """\
HloModule jit_convert_element_type, entry_computation_layout={(bf16[])->bf16[]}

ENTRY %main.1 (args_0_.1: bf16[]) -> bf16[] {
  %args_0_.1 = bf16[] parameter(0)
  ROOT %copy = bf16[] copy(%args_0_.1)
}
"""


# XLA:GPU: the returned parameter goes through a tuple before the copy.
_GPU_TUPLE_COPY = """\
HloModule jit_sample, is_scheduled=true, entry_computation_layout={(f32[64,64]{1,0})->(f32[64]{0}, f32[64,64]{1,0})}

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %main.3 (logits.1: f32[64,64]) -> (f32[64], f32[64,64]) {
  %logits.1 = f32[64,64]{1,0} parameter(0), metadata={op_name="logits"}
  %c = f32[] constant(-inf)
  %r = f32[64]{0} reduce(%logits.1, %c), dimensions={1}, to_apply=%max
  %tuple = (f32[64]{0}, f32[64,64]{1,0}) tuple(%r, %logits.1)
  %get-tuple-element.5 = f32[64]{0} get-tuple-element(%tuple), index=0
  %get-tuple-element.6 = f32[64,64]{1,0} get-tuple-element(%tuple), index=1
  %copy.1 = f32[64,64]{1,0} copy(%get-tuple-element.6)
  ROOT %tuple.2 = (f32[64]{0}, f32[64,64]{1,0}) tuple(%get-tuple-element.5, %copy.1)
}
"""

# A multi-output fusion that passes its parameter through (bitcast) next to real work.
_FUSION_PASS_THROUGH = """\
HloModule jit_f, entry_computation_layout={(f32[64,64]{1,0})->(f32[64,64]{1,0}, f32[64,64]{1,0})}

%fused (p: f32[64,64]) -> (f32[64,64], f32[64,64]) {
  %p = f32[64,64]{1,0} parameter(0)
  %n = f32[64,64]{1,0} negate(%p)
  %b = f32[64,64]{1,0} bitcast(%p)
  ROOT %t = (f32[64,64]{1,0}, f32[64,64]{1,0}) tuple(%n, %b)
}

ENTRY %main.1 (x.1: f32[64,64]) -> (f32[64,64], f32[64,64]) {
  %x.1 = f32[64,64]{1,0} parameter(0)
  %fusion = (f32[64,64]{1,0}, f32[64,64]{1,0}) fusion(%x.1), kind=kLoop, calls=%fused
  %g0 = f32[64,64]{1,0} get-tuple-element(%fusion), index=0
  %g1 = f32[64,64]{1,0} get-tuple-element(%fusion), index=1
  %copy.3 = f32[64,64]{1,0} copy(%g1)
  ROOT %out = (f32[64,64]{1,0}, f32[64,64]{1,0}) tuple(%g0, %copy.3)
}
"""

# The same fusion, but the copied output is computed (negate): not the parameter.
_FUSION_COMPUTES = _FUSION_PASS_THROUGH.replace("%copy.3 = f32[64,64]{1,0} copy(%g1)",
                                                "%copy.3 = f32[64,64]{1,0} copy(%g0)")

# XLA:CPU, jax 0.10.2: ``jnp.asarray(np.ones((64, 64), np.float32))`` outside jit. jax stages the
# NumPy array with a program of its own (the ``stage`` primitive) that only copies it.
_STAGED_NUMPY = """\
HloModule jit_stage, is_scheduled=true, entry_computation_layout={(f32[64,64]{1,0})->f32[64,64]{1,0}}, allow_spmd_sharding_propagation_to_parameters={true}, allow_spmd_sharding_propagation_to_output={true}

ENTRY %main.1 (args_0_.1: f32[64,64]) -> f32[64,64] {
  %args_0_.1 = f32[64,64]{1,0} parameter(0), metadata={op_name="args[0]"}
  ROOT %copy = f32[64,64]{1,0} copy(%args_0_.1)
}
"""

# SPMD: the copy changes the sharding (a reshard), not a copy-insertion copy.
_RESHARD = _IDENTITY.replace("parameter(0)", "parameter(0), sharding={devices=[2,1]0,1}").replace(
    "copy(%x.1)", "copy(%x.1), sharding={replicated}")

# Host offload: the copy moves the value to another memory space (S(5): host memory).
_MEMORY_SPACE_MOVE = """\
HloModule jit_offload, entry_computation_layout={(f32[64,64]{1,0})->f32[64,64]{1,0:S(5)}}

ENTRY %main.1 (x.1: f32[64,64]) -> f32[64,64] {
  %x.1 = f32[64,64]{1,0} parameter(0)
  ROOT %copy.1 = f32[64,64]{1,0:S(5)} copy(%x.1)
}
"""


class AliasingCopy(Rule):
    """A ``copy`` that exists only because the program returns one of its inputs.

    What it flags:
        A ``copy`` in the entry computation whose operand is an entry parameter, whose layout is
        the same on both sides, and whose result is (part of) the program's output, while that
        parameter is not donated (not in ``input_output_alias``). The operand is followed back
        through what only moves a value (``bitcast``, ``get-tuple-element`` of a ``tuple``, a
        fusion output that passes a parameter through, an asynchronous copy pair): XLA:GPU writes
        the copy as ``copy(get-tuple-element(tuple(..., parameter)))``, XLA:TPU as
        ``copy(copy-done(copy-start(parameter)))`` (through its alternate memory, ``S(1)``, and
        back; the pair's time counts with the copy's when nothing else reads it). The finding
        says which output and which parameter. Copies under 4 KiB (scalars, small metadata arrays) are ignored, and
        so are copies that change ``sharding=`` (reshards) or the memory space (``{1,0:S(5)}``,
        host offload): those move the value somewhere else, they do not alias it. On unoptimized
        HLO (as lowered) the finding is low severity and says the stage: the copy seen there is
        the program's own, and copy insertion decides after XLA's passes.
    Why it costs:
        A jitted function that returns its input without donation cannot hand back the caller's
        buffer, so XLA's copy insertion materialises a full copy of it: one read and one write of
        the whole tensor per call, for no computation at all (1.5 ms per step for
        f32[512,256000] on TPU v5e). On XLA:CPU a copy that ends its program also holds the step
        while the runtime finishes the run after it (the idle while the host waits, read from the
        trace: ``hlo_doctor.lint.runtime_gaps``); the estimate counts that too.
    Example:
        A greedy ``sample()`` whose branch does ``ret_logits = logits`` and returns it.
    Fix:
        Depends on the program, and the message says which. A jitted program of yours: do not
        return the input: return a value the program computes (for a sampler, the single f32
        widening done inside it, ``bf16-greedy-sampler``), return nothing when the caller does not
        need it, or donate the argument (``donate_argnums``) when the caller is done with it. A
        program that only copies (jax staging a NumPy array, ``jit_stage``; an eager
        ``jnp.array(x)``/``x.copy()``, ``jit_copy``): there is nothing to return or donate: make the
        device array once, outside the step, and pass the ``jax.Array``. A program traced inside a
        framework (no frame of code you edit in its stack): the return is the framework's; look for
        a donation option of its API.
    """

    code = "HD002"
    name = "copy.aliasing-input"
    severity = Severity.HIGH
    requires = ("hlo",)
    fix = "bf16-greedy-sampler"

    VALID = (
        Example(hlo=(_DONATED,), note="donated parameter"),
        Example(hlo=(_TRANSPOSING_COPY,), note="layout-changing copy"),
        Example(hlo=(_COPY_NOT_RETURNED,), note="copy that is not an output"),
        Example(hlo=(_SCALAR,), note="a scalar copy"),
        Example(hlo=(_FUSION_COMPUTES,), note="a copy of a value a fusion computes"),
        Example(hlo=(_RESHARD,), note="a copy that changes sharding= (a reshard)"),
        Example(hlo=(_MEMORY_SPACE_MOVE,), note="a copy to another memory space (host offload)"),
    )
    INVALID = (
        Example(hlo=(_RETURNS_INPUT,), expect=("HD002 copy",), note="sampler returning its input"),
        Example(hlo=(_IDENTITY,), expect=("HD002 copy.1",), note="identity function"),
        Example(hlo=(_GPU_TUPLE_COPY,), expect=("HD002 copy.1",), note="XLA:GPU copy(get-tuple-element(tuple))"),
        Example(hlo=(_FUSION_PASS_THROUGH,), expect=("HD002 copy.3",),
                note="a multi-output fusion passing the parameter through"),
        Example(hlo=(_STAGED_NUMPY,), expect=("HD002 copy",),
                note="jax staging a NumPy array (jit_stage, XLA:CPU): says so, no donation advice"),
        Example(
            hlo=(_RETURNS_INPUT,),
            opstats=({"module": "jit_sample", "op": "copy", "occurrences": 10, "time_per_step_us": 30.0},),
            step_time_us=1000.0, num_steps=10, expect=("HD002 copy",), note="with op stats",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            donated = m.aliased_parameters()
            for inst in m.entry.instructions:
                if inst.opcode != "copy" or not m.is_live_out(inst) or inst.shape.nbytes < MIN_BYTES:
                    continue
                found = entry_parameter_of(m, m.operands_of(inst)[0]) if m.operands_of(inst) else None
                if found is None:
                    continue
                param, part = found
                if param.parameter_number in donated:
                    continue
                if part.layout != inst.shape.layout or part.dims != inst.shape.dims:
                    continue
                if part.memory_space != inst.shape.memory_space:
                    continue  # a move to another memory space (host offload): not aliasing
                if inst.attribute("sharding") and inst.attribute("sharding") != param.attribute("sharding"):
                    continue  # a reshard: the copy changes how the value is laid out across devices
                stage = stage_of(m, ctx.origin)
                outputs = m.output_indices_of(inst)
                where = ", ".join(str(i) for i in outputs) or "0"
                what, fix = _what_to_do(m, inst, outputs)
                # XLA:CPU: a copy that ends its program also leaves the runtime's idle after it while
                # the host waits (releasing what the run allocated: lint.runtime_gaps); it goes with it.
                gaps = runtime_gaps(ctx, m.name, inst.name) if ctx.has_opstats else None
                timing = ctx.op_timing(m, inst.name) if gaps is not None else None
                # XLA:TPU: the copy reads the parameter through its alternate memory (an asynchronous
                # copy there first); a pair that feeds only this copy goes with it, and its time too.
                pair = _pair_only_for(m, inst)
                parts = None
                if timing is not None and gaps is not None:
                    parts = bounded(ctx, op=timing.time_per_step_us, op_bound=timing.time_per_step_us,
                                    runtime_idle=gaps.recoverable_us)
                elif pair:
                    times = [t.time_per_step_us for t in (ctx.op_timing(m, i.name) for i in (inst, *pair))
                             if t is not None]
                    parts = bounded(ctx, op=sum(times), op_bound=sum(times)) if times else None
                yield ctx.finding(
                    self, m, inst,
                    f"{inst.name} copies parameter {param.parameter_number} ({param.name}, "
                    f"{dtype_shape(part)}, {fmt_bytes(inst.shape.nbytes)}) into output {where}: {what}"
                    + ("" if stage.optimized else "; unoptimized HLO: copy insertion decides after XLA's passes"),
                    severity=None if stage.optimized else Severity.LOW,
                    recoverable_fraction=1.0,
                    # The copy's own time (with the pair before it) and, apart, the runtime's idle it
                    # leaves (lint.parts bounds each).
                    parts=parts,
                    # The copy has no metadata of its own (copy insertion adds it): the parameter's
                    # line when it has one, else no source rather than an unrelated op's line.
                    source_inst=param if param.source else None,
                    evidence=tuple(dict.fromkeys((param.raw, inst.raw, m.entry.root.raw,
                                                  *(() if stage.optimized else (stage.evidence(),))))),
                    fix=fix,
                    extra=(("parameter", param.parameter_number), ("parameter_name", param.name),
                           *((("through", tuple(i.name for i in pair)),) if pair else ()),
                           ("output_indices", tuple(outputs)), *(gaps.extra() if gaps is not None else ())),
                )


def _what_to_do(m: HloModule, copy: HloInstruction, outputs: list[int]) -> tuple[str, str]:
    """(why the copy is there and what removes it, where it can be removed; the bundled fix id or "").

    A program that only copies is jax moving an input (nothing to return or donate); a program
    traced inside a framework returns what the framework returns; only a jitted program of one's
    own takes "return something else, or donate".
    """
    origin = origin_of(m, copy)
    if origin.staging and origin.eager:
        action = {"stage": "convert it once, outside the step (jax.device_put), and pass the jax.Array",
                  "convert_element_type": "convert it once, outside the step, and pass the jax.Array",
                  "copy": "drop the copy, or make it once outside the step"}.get(
            origin.eager.lstrip("_"), "do it once, outside the step, and pass the jax.Array")
        return (f"program {m.name} only copies: {staging_cause(m)}; it has no return to change and nothing "
                f"to donate: {action}"), ""
    if origin.staging:
        return (f"program {m.name} only returns its input: drop the call, or donate the argument "
                f"(donate_argnums) when the caller is done with it"), ""
    if origin.program_framework:
        return (f"program {m.name} is traced inside {origin.program_framework} (no frame of code you edit "
                f"in its stack) and returns its input without donation: the return is "
                f"{origin.program_framework}'s; look for a donation option of its API"), ""
    return ("the program returns its input without donation: return a value it computes, nothing, or donate "
            "the argument (donate_argnums) when the caller is done with it",
            "bf16-greedy-sampler" if is_argmax_program(m) else "")


def _pair_only_for(m: HloModule, copy: HloInstruction) -> tuple[HloInstruction, ...]:
    """The asynchronous copy pair the ``copy`` reads (``copy-done``, ``copy-start``), when nothing else
    reads it; empty otherwise."""
    ops = m.operands_of(copy)
    pair = async_copies_before(m, ops[0]) if ops else ()
    reader = copy
    for i in pair:
        if any(u is not reader for u in m.users_of(i)):
            return ()
        reader = i
    return pair
