"""HD010: a copy of a loop-carried buffer inside a ``while`` body, paid on every iteration."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

from hlo_doctor.hlo import HloComputation, HloInstruction, HloModule
from hlo_doctor.hlo.analysis import dtype_shape
from hlo_doctor.hlo.group_work import draws_random
from hlo_doctor.hlo.loops import loop_rebuilds
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes, stage_of

# Below this a copy is a counter or a scalar, not a buffer worth a finding.
MIN_BYTES = 4096
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")

_COND = """\
%cond (t.3: (s32[], f32[256,128], f32[256,128])) -> pred[] {
  %t.3 = (s32[], f32[256,128]{1,0}, f32[256,128]{1,0}) parameter(0)
  %i.3 = s32[] get-tuple-element(%t.3), index=0
  %n = s32[] constant(16)
  ROOT %lt = pred[] compare(%i.3, %n), direction=LT
}
"""

# XLA:CPU's loop carrying (i, cache, previous) and returning (i + 1, update(cache), cache): the old
# cache must outlive the in-place update, so the body copies it every iteration.
_CARRIED_COPY = """\
HloModule jit_decode, is_scheduled=true, entry_computation_layout={(f32[256,128]{1,0})->(f32[256,128]{1,0}, f32[256,128]{1,0})}

%body (t.1: (s32[], f32[256,128], f32[256,128])) -> (s32[], f32[256,128], f32[256,128]) {
  %t.1 = (s32[], f32[256,128]{1,0}, f32[256,128]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%t.1), index=0
  %c.1 = f32[256,128]{1,0} get-tuple-element(%t.1), index=1
  %copy.5 = f32[256,128]{1,0} copy(%c.1)
  %one = s32[] constant(1)
  %i.2 = s32[] add(%i.1, %one)
  %row = f32[1,128]{1,0} broadcast(%one), dimensions={}
  %zero = s32[] constant(0)
  %c.2 = f32[256,128]{1,0} dynamic-update-slice(%c.1, %row, %i.1, %zero), metadata={op_name="jit(decode)/while/body/dynamic_update_slice" source_file="decode.py" source_line=20}
  ROOT %t.2 = (s32[], f32[256,128]{1,0}, f32[256,128]{1,0}) tuple(%i.2, %c.2, %copy.5)
}

""" + _COND + """
ENTRY %main.1 (cache.1: f32[256,128]) -> (f32[256,128], f32[256,128]) {
  %cache.1 = f32[256,128]{1,0} parameter(0)
  %zero.1 = s32[] constant(0)
  %tuple.1 = (s32[], f32[256,128]{1,0}, f32[256,128]{1,0}) tuple(%zero.1, %cache.1, %cache.1)
  %while.1 = (s32[], f32[256,128]{1,0}, f32[256,128]{1,0}) while(%tuple.1), condition=%cond, body=%body, metadata={op_name="jit(decode)/while" source_file="decode.py" source_line=27}
  %g.1 = f32[256,128]{1,0} get-tuple-element(%while.1), index=1
  %g.2 = f32[256,128]{1,0} get-tuple-element(%while.1), index=2
  ROOT %out = (f32[256,128]{1,0}, f32[256,128]{1,0}) tuple(%g.1, %g.2)
}
"""

# The loop only writes its cache: updated in place, no copy in the body.
_IN_PLACE = _CARRIED_COPY.replace("  %copy.5 = f32[256,128]{1,0} copy(%c.1)\n", "").replace(
    "tuple(%i.2, %c.2, %copy.5)", "tuple(%i.2, %c.2, %c.2)")

# A copy in the body that transposes a carried buffer: work of its own, not a loop-carried copy.
_TRANSPOSING = _CARRIED_COPY.replace(
    "%copy.5 = f32[256,128]{1,0} copy(%c.1)", "%copy.5 = f32[256,128]{0,1} copy(%c.1)")

# The entry copies the parameter before the loop (HD009's case), the body copies nothing.
_ENTRY_COPY = _IN_PLACE.replace(
    "  %zero.1 = s32[] constant(0)\n", "  %zero.1 = s32[] constant(0)\n  %copy.9 = f32[256,128]{1,0} copy(%cache.1)\n")


# As lowered (not scheduled, no fusion): a copy there is dropped by XLA's simplifier.
_LOWERED = _CARRIED_COPY.replace("is_scheduled=true, ", "")


class LoopCarriedCopy(Rule):
    """A ``copy`` of a loop-carried buffer inside a ``while`` body: paid on every iteration.

    What it flags:
        A ``copy`` in the body of a ``while`` whose operand is an element of the loop's state
        (``copy(get-tuple-element(parameter))``, through bitcasts and earlier copies), with the
        same layout and memory space on both sides, 4 KiB or more. XLA inserts such copies when
        the old value of a carried buffer must outlive its in-place update: the body returns
        the buffer next to its update, or reads it after writing it. A copy that is one step of a
        rebuild of the element (cut into pieces and put back together) is left to HD013, which
        sizes the whole rebuild: one cause, one finding. The hash loop of jax's PRNG (a program that
        draws random bits) is left out: drawing them on every call is what HD014 reports. With op
        stats, the finding
        gives the copy's time per step, how many iterations ran per step, and the time per
        iteration. Only optimized modules are read: before XLA's passes a copy that changes nothing
        (a lowered sharding constraint after SPMD partitioning) is removed by XLA's simplifier.
    Why it costs:
        The copy runs once per iteration: a decode loop copying its KV cache on every token moves
        the whole cache per token (recurrentgemma's sampler: 75 such copies per step), where the
        update itself writes one row.
    Example:
        ``while_loop(cond, lambda s: (s[0] + 1, update(s[1]), s[1]), (0, cache, cache))``:
        ``%copy.5 = f32[256,128]{1,0} copy(%get-tuple-element.7)`` in the body.
    Fix:
        Do not carry the old buffer next to the new one: carry what is needed of it (a row, a
        scalar), or read what you need before the update so that XLA can order the read first.
        ``jax.lax.fori_loop``/``scan`` bodies that only write their carried cache
        (``dynamic_update_slice``) are updated in place.
    """

    code = "HD010"
    name = "loop.carried-copy"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = ""

    VALID = (
        Example(hlo=(_IN_PLACE,), note="the cache updated in place"),
        Example(hlo=(_TRANSPOSING,), note="a transposing copy in the body"),
        Example(hlo=(_ENTRY_COPY,), note="a copy before the loop (HD009's case)"),
        Example(hlo=(_LOWERED,), note="unoptimized HLO"),
    )
    INVALID = (
        Example(hlo=(_CARRIED_COPY,), expect=("HD010 copy.5",), note="old cache carried next to the new one"),
        Example(
            hlo=(_CARRIED_COPY,),
            opstats=({"module": "jit_decode", "op": "copy.5", "occurrences": 64, "time_per_step_us": 80.0,
                      "category": "copy"},
                     {"module": "jit_decode", "op": "while.1", "occurrences": 4, "time_per_step_us": 300.0}),
            step_time_us=400.0, num_steps=4, expect=("HD010 copy.5",),
            note="with op stats: 16 iterations per step, 5 us each",
        ),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            if not stage_of(m, ctx.origin).optimized:
                continue  # copy insertion has not run; XLA's simplifier drops a copy that changes nothing
            # A copy that is one step of a whole-buffer rebuild is reported, with the rest of it, by HD013.
            rebuilt = {(op.computation, op.name)
                       for flow in loop_rebuilds(m) for op in (*flow.chain, *flow.movement)}
            for loop in m.instructions():
                if loop.opcode != "while":
                    continue
                body = _body_of(m, loop)
                if body is None or not body.parameters:
                    continue
                if draws_random(m, (loop, *body.instructions)):
                    continue  # jax's PRNG hash loop: the per-call draw itself is HD014's (one cause)
                state = body.parameters[0]
                for inst in body.instructions:
                    if inst.opcode != "copy" or inst.shape.nbytes < MIN_BYTES:
                        continue
                    if (inst.computation, inst.name) in rebuilt:
                        continue
                    index = _carried_index(m, inst, state)
                    if index is not None:
                        yield self._finding(ctx, m, loop, inst, index)

    def _finding(self, ctx: Context, m: HloModule, loop: HloInstruction, inst: HloInstruction,
                 index: int) -> Finding:
        # The source line: the body op that uses the copy (what the program wrote), else the loop's.
        user = next((u for u in m.users_of(inst) if u.source), None)
        message = (f"{inst.name} copies loop-carried element {index} ({dtype_shape(inst.shape)}, "
                   f"{fmt_bytes(inst.shape.nbytes)}) inside the body of {loop.name} on every iteration")
        found = ctx.finding(
            self, m, inst, message, recoverable_fraction=1.0, source_inst=user or loop,
            evidence=(inst.raw, loop.raw),
            extra=(("loop", loop.name), ("tuple_index", index)),
        )
        # The copy runs (and is traced) once per iteration under its own name: the finding is timed
        # on its row, whose occurrences count the iterations.
        timing = ctx.op_timing(m, inst.name)
        if timing is None:
            return replace(found, bytes_accessed=2 * inst.shape.nbytes)
        iterations = timing.occurrences_per_device / ctx.num_steps if ctx.num_steps else 0.0
        if iterations:
            message += (f": {iterations:.0f} iterations per step, "
                        f"{timing.time_per_step_us / iterations:.1f} us per iteration")
        return replace(
            found, message=message, bytes_accessed=timing.bytes_accessed or 2 * inst.shape.nbytes,
            extra=(*found.extra, ("iterations_per_step", iterations)),
        )


def _body_of(m: HloModule, loop: HloInstruction) -> HloComputation | None:
    match = _BODY.search(loop.raw)
    if match:
        return m.computation(match.group(1))
    # Without the raw text: the called computation whose root is not a predicate.
    for name in loop.called_computations:
        comp = m.computation(name)
        if comp is not None and comp.root.dtype != "pred":
            return comp
    return None


def _carried_index(m: HloModule, inst: HloInstruction, state: HloInstruction) -> int | None:
    """The state tuple index that ``inst`` copies unchanged, or None."""
    ops = m.operands_of(inst)
    cur = ops[0] if ops else None
    if cur is None or (cur.shape.layout, cur.shape.dims) != (inst.shape.layout, inst.shape.dims):
        return None
    for _ in range(16):  # a chain of copies and bitcasts is short
        if cur.opcode in ("copy", "bitcast"):
            ops = m.operands_of(cur)
            if not ops:
                return None
            cur = ops[0]
            continue
        if cur.opcode == "get-tuple-element":
            ops = m.operands_of(cur)
            if ops and (ops[0].name, ops[0].computation) == (state.name, state.computation):
                return int(cur.attribute("index", "0") or 0)
        return None
    return None
