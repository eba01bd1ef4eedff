"""HD009: a parameter copied into a ``while``/``call`` because the program does not donate it."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hlo_doctor.hlo import HloInstruction, HloModule, HloShape
from hlo_doctor.hlo.analysis import dtype_shape, entry_parameter_of
from hlo_doctor.hlo.origin import origin_of
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes, stage_of

# Below this a copy is noise (scalars, loop counters) next to the state it travels with.
MIN_BYTES = 4096
# Where a copy's value may go on its way into the loop without being computed on.
_PLUMBING = frozenset({"tuple", "bitcast", "copy", "get-tuple-element"})
# What runs a computation on the state: the copy exists so that it can update a buffer of its own.
_CALLS = frozenset({"while", "call", "conditional", "async-start"})
_DONOR = re.compile(r"buffer_donor=\{([^}]*)\}")
_DONOR_PARAM = re.compile(r"\((\d+)")

_BODY = """\
%body (t.1: (s32[], f32[64,32])) -> (s32[], f32[64,32]) {
  %t.1 = (s32[], f32[64,32]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%t.1), index=0
  %c.1 = f32[64,32]{1,0} get-tuple-element(%t.1), index=1
  %one = s32[] constant(1)
  %i.2 = s32[] add(%i.1, %one)
  %row = f32[1,32]{1,0} broadcast(%one), dimensions={}
  %zero = s32[] constant(0)
  %c.2 = f32[64,32]{1,0} dynamic-update-slice(%c.1, %row, %i.1, %zero)
  ROOT %t.2 = (s32[], f32[64,32]{1,0}) tuple(%i.2, %c.2)
}

%cond (t.3: (s32[], f32[64,32])) -> pred[] {
  %t.3 = (s32[], f32[64,32]{1,0}) parameter(0)
  %i.3 = s32[] get-tuple-element(%t.3), index=0
  %n = s32[] constant(8)
  ROOT %lt = pred[] compare(%i.3, %n), direction=LT
}
"""

# XLA:CPU's decode loop without donation: the cache is copied before the while on every call.
_NOT_DONATED = """\
HloModule jit_generate, is_scheduled=true, entry_computation_layout={(f32[64,32]{1,0}, s32[])->(f32[64,32]{1,0}, s32[])}

""" + _BODY + """
ENTRY %main.1 (state_cache.1: f32[64,32], state_pos.1: s32[]) -> (f32[64,32], s32[]) {
  %state_cache.1 = f32[64,32]{1,0} parameter(0), metadata={op_name="state.cache"}
  %state_pos.1 = s32[] parameter(1), metadata={op_name="state.pos"}
  %copy.1 = f32[64,32]{1,0} copy(%state_cache.1)
  %copy.2 = s32[] copy(%state_pos.1)
  %tuple.1 = (s32[], f32[64,32]{1,0}) tuple(%copy.2, %copy.1)
  %while.1 = (s32[], f32[64,32]{1,0}) while(%tuple.1), condition=%cond, body=%body, metadata={op_name="jit(generate)/while" source_file="decode.py" source_line=36}
  %g.1 = f32[64,32]{1,0} get-tuple-element(%while.1), index=1
  %g.2 = s32[] get-tuple-element(%while.1), index=0
  ROOT %out = (f32[64,32]{1,0}, s32[]) tuple(%g.1, %g.2)
}
"""

# The same program with the state donated: the while updates the caller's buffers in place.
_DONATED = _NOT_DONATED.replace(
    "is_scheduled=true,", "is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, may-alias) },"
).replace("  %copy.1 = f32[64,32]{1,0} copy(%state_cache.1)\n  %copy.2 = s32[] copy(%state_pos.1)\n", "").replace(
    "tuple(%copy.2, %copy.1)", "tuple(%state_pos.1, %state_cache.1)")

# A copy that changes the layout: it does work, donation would not remove it.
_LAYOUT_COPY = _NOT_DONATED.replace("%copy.1 = f32[64,32]{1,0} copy", "%copy.1 = f32[64,32]{0,1} copy").replace(
    "tuple(%copy.2, %copy.1)", "tuple(%copy.2, %state_cache.1)")

# The loop's state is a fresh buffer and nothing returned has the parameter's shape: no buffer to reuse.
_NO_MATCHING_OUTPUT = _NOT_DONATED.replace(
    "->(f32[64,32]{1,0}, s32[])}", "->s32[]}").replace(") -> (f32[64,32], s32[]) {", ") -> s32[] {").replace(
    "  ROOT %out = (f32[64,32]{1,0}, s32[]) tuple(%g.1, %g.2)", "  ROOT %out = s32[] copy(%g.2)")


# As lowered (not scheduled, no fusion): copy insertion has not run yet.
_LOWERED = _NOT_DONATED.replace("is_scheduled=true, ", "")

# The loop takes the parameter and its copy: two live values, donation cannot remove the copy.
_BOTH_LIVE = _NOT_DONATED.replace("tuple(%copy.2, %copy.1)", "tuple(%copy.2, %copy.1, %state_cache.1)")


class LoopStateNotDonated(Rule):
    """A parameter copied into a ``while``/``call`` on every call, because it is not donated.

    What it flags:
        A ``copy`` in the entry computation of an entry parameter (same dimensions, layout and
        memory space on both sides) whose value goes, through tuples only, into a ``while``,
        ``call`` or ``conditional``, while the parameter is not donated (not in
        ``input_output_alias`` or ``buffer_donor``) and the program returns an array of the
        parameter's dtype and dimensions, so that a donated buffer could be reused. This is
        the state of a decode loop (KV caches, positions) handed to a jitted ``while_loop``
        without ``donate_argnums``: the loop updates its state in place, so XLA first copies
        every parameter the caller keeps. Not flagged: copies under 4 KiB (counters, scalars),
        copies that go straight to the output (HD002's), and a copy the loop takes next to the
        original parameter (both values are live: donation cannot merge them). Only optimized
        modules are read: before XLA's passes, copy insertion has not run, and a copy that
        changes nothing is removed by XLA's simplifier.
    Why it costs:
        Every call reads and writes the whole state once before the loop starts: for a sampler
        called once per generated sequence, the size of the KV caches per call (~1.6 GiB at
        Gemma3-1B size), plus the memory for a second copy of them.
    Example:
        ``jax.jit(sample_loop)(state)`` with ``state`` holding the KV caches:
        ``%copy.19 = f32[64,4,32]{2,1,0} copy(%state_k_0_.1)`` feeding ``while(%tuple)``.
    Fix:
        Donate the state when the caller does not use it after the call:
        ``jax.jit(sample_loop, donate_argnames="state")`` (or ``donate_argnums``), and use the
        returned state from then on. JAX warns when a donated buffer cannot be used. A loop run
        eagerly (``lax.while_loop`` outside ``jit``: program ``jit_while``) has no jit call to
        donate at: jit the code around it and donate there. A program traced inside a framework
        (no frame of code you edit in its stack) is jitted by the framework: the message says so;
        donation is then an option of its API, if it has one.
    """

    code = "HD009"
    name = "donation.loop-state-copied"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = "donate-state"

    VALID = (
        Example(hlo=(_DONATED,), note="the state donated: no copy before the loop"),
        Example(hlo=(_LAYOUT_COPY,), note="a layout-changing copy (work donation does not remove)"),
        Example(hlo=(_NO_MATCHING_OUTPUT,), note="no output the parameter's buffer could become"),
        Example(hlo=(_LOWERED,), note="unoptimized HLO: copy insertion has not run"),
        Example(hlo=(_BOTH_LIVE,), note="the loop takes the parameter and its copy"),
    )
    INVALID = (
        Example(hlo=(_NOT_DONATED,), expect=("HD009 copy.1",), note="decode loop state not donated"),
        Example(
            hlo=(_NOT_DONATED,),
            opstats=({"module": "jit_generate", "op": "copy.1", "occurrences": 4, "time_per_step_us": 12.0,
                      "category": "copy"},),
            step_time_us=400.0, num_steps=4, expect=("HD009 copy.1",), note="with op stats",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            stage = stage_of(m, ctx.origin)
            if not stage.optimized:
                continue  # copy insertion has not run; XLA's simplifier drops a copy that changes nothing
            donated = _donated(m)
            outputs = {(s.dtype, s.dims) for s in _leaves(m.entry.root.shape)}
            for inst in m.entry.instructions:
                if inst.opcode != "copy" or inst.shape.nbytes < MIN_BYTES or m.is_live_out(inst):
                    continue
                ops = m.operands_of(inst)
                found = entry_parameter_of(m, ops[0]) if ops else None
                if found is None:
                    continue
                param, part = found
                if param.parameter_number in donated or (inst.dtype, inst.shape.dims) not in outputs:
                    continue
                if (part.layout, part.dims) != (inst.shape.layout, inst.shape.dims):
                    continue  # a layout or memory-space change is work of its own
                loop = _loop_fed_by(m, inst)
                if loop is None or _loop_fed_by(m, param, through_copies=False) is loop:
                    continue  # the loop also takes the original: both live, donation cannot merge them
                origin = origin_of(m, loop)
                if origin.eager:
                    where = f", {origin.where()}" if origin.line else ""
                    todo = (f"the {loop.opcode} runs eagerly (program {m.name}: a lax.{origin.eager}_loop outside jit"
                            f"{where}), so jax copies its state on every call: jit the code that runs the loop and "
                            f"donate the state there (donate_argnums)") if origin.eager == "while" else (
                            f"program {m.name} runs eagerly{where}: jit the code that calls it and donate the state "
                            f"there (donate_argnums)")
                elif origin.program_framework:
                    todo = (f"program {m.name} is jitted inside {origin.program_framework} (no frame of code you "
                            f"edit in its stack): donation is an option of its API, if it has one")
                else:
                    todo = (f"donate it (donate_argnums where {m.name} is jitted) to let the {loop.opcode} update "
                            f"it in place" + (f"; the loop is {origin.where()}" if origin.line else ""))
                yield ctx.finding(
                    self, m, inst,
                    f"{inst.name} copies parameter {param.parameter_number} ({param.name}, {dtype_shape(part)}, "
                    f"{fmt_bytes(inst.shape.nbytes)}) into {loop.opcode} {loop.name} on every call: the "
                    f"parameter is not donated; {todo}",
                    recoverable_fraction=1.0,
                    fix="" if origin.eager or origin.program_framework else None,
                    source_inst=param if param.source else loop,
                    evidence=(param.raw, inst.raw, loop.raw),
                    extra=(("parameter", param.parameter_number), ("parameter_name", param.name),
                           ("loop", loop.name)),
                )


def _donated(m: HloModule) -> set[int]:
    """Parameters the output may reuse: ``input_output_alias`` and ``buffer_donor``."""
    donors = set(m.aliased_parameters())
    header = m.text.splitlines()[0] if m.text else ""
    dm = _DONOR.search(header)
    if dm:
        donors |= {int(p) for p in _DONOR_PARAM.findall(dm.group(1))}
    return donors


def _leaves(shape: HloShape) -> list[HloShape]:
    """The array shapes of a (possibly nested) tuple shape."""
    if shape.is_tuple:
        return [leaf for e in shape.elements for leaf in _leaves(e)]
    return [shape]


def _loop_fed_by(m: HloModule, inst: HloInstruction, *, through_copies: bool = True) -> HloInstruction | None:
    """The ``while``/``call``/``conditional`` that ``inst``'s value reaches through plumbing only."""
    plumbing = _PLUMBING if through_copies else _PLUMBING - {"copy"}
    stack, seen = [inst], {inst.name}
    while stack:
        for u in m.users_of(stack.pop()):
            if u.opcode in _CALLS:
                return u
            if u.opcode in plumbing and u.name not in seen:
                seen.add(u.name)
                stack.append(u)
    return None
