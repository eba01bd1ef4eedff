"""HD016: state passed in and returned updated without donation: the program holds it twice."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloInstruction, HloModule, HloShape
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes

# Below this the state is noise (counters, positions) next to the rest of the peak.
MIN_BYTES = 64 * 1024
# An update XLA can do in the caller's buffer once it is donated.
_UPDATES = frozenset({"dynamic-update-slice", "scatter", "while"})

_CACHE_STEP = """\
HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[64,256]{1,0}, f32[1,256]{1,0}, s32[])->f32[64,256]{1,0}}

%fused_update (p0: f32[64,256], p1: f32[1,256], p2: s32[]) -> f32[64,256] {
  %p0 = f32[64,256]{1,0} parameter(0)
  %p1 = f32[1,256]{1,0} parameter(1)
  %p2 = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %dus = f32[64,256]{1,0} dynamic-update-slice(%p0, %p1, %p2, %z), metadata={op_name="jit(step)/dynamic_update_slice" source_file="decode.py" source_line=41}
}

ENTRY %main.1 (cache.1: f32[64,256], row.1: f32[1,256], pos.1: s32[]) -> f32[64,256] {
  %cache.1 = f32[64,256]{1,0} parameter(0), metadata={op_name="cache"}
  %row.1 = f32[1,256]{1,0} parameter(1)
  %pos.1 = s32[] parameter(2)
  ROOT %update_fusion = f32[64,256]{1,0} fusion(%cache.1, %row.1, %pos.1), kind=kLoop, calls=%fused_update, metadata={op_name="jit(step)/dynamic_update_slice" source_file="decode.py" source_line=41}
}
"""


def _alloc(index: int, size: int, category: str, instruction: str, param: int | None = None,
           live_out: bool = False) -> dict[str, object]:
    return {"index": index, "size_bytes": size, "category": category, "parameter_number": param,
            "live_out": live_out, "instruction": instruction, "shape": ""}


def _memory(donated: bool) -> dict[str, object]:
    cache, row = 64 * 256 * 4, 256 * 4
    allocs = [_alloc(0, cache, "argument", "cache.1", 0, live_out=donated), _alloc(1, row, "argument", "row.1", 1),
              _alloc(2, 4, "argument", "pos.1", 2)]
    if not donated:
        allocs.append(_alloc(3, cache, "output", "update_fusion", live_out=True))
    peak = cache * (1 if donated else 2) + row + 4
    return {"programs": [{"module": "jit_step", "peak_bytes": peak, "argument_bytes": cache + row + 4,
                          "output_bytes": cache, "alias_bytes": cache if donated else 0, "allocations": allocs}]}


class StateHeldTwice(Rule):
    """State passed in and returned updated without donation: the program holds it twice at its peak.

    What it flags:
        An entry parameter of 64 KiB or more, not donated, and an output of the same dtype and
        dimensions computed from it through an update XLA could do in place
        (``dynamic-update-slice``, ``scatter``, a ``while`` loop): a KV cache written one row per
        step, a loop's state. The buffer assignment shows both: the argument's allocation and a
        second, as large, for the output. Needs the program's buffer assignment (an ``.xplane.pb``).
    Why it costs:
        Device memory: both buffers live for the whole program, so its peak holds the state twice;
        donated, the output takes the argument's buffer and the peak drops by the output's size (the
        freed bytes are that allocation's size, what a compile with ``donate_argnums`` gives). On a
        serving stack those bytes are KV-cache blocks, and so sequences, that do not fit. Time: the
        update also writes the whole new buffer where it would write one row.
    Example:
        ``jax.jit(step)(cache, row, pos)`` returning ``cache.at[pos].set(row)``: argument ``cache.1``
        and output ``update_fusion``, 64 KiB each.
    Fix:
        Donate the state when the caller does not read the old value again:
        ``jax.jit(step, donate_argnums=0)`` (or ``donate_argnames``), and rebind it from the result.
    """

    code = "HD016"
    name = "memory.state-held-twice"
    severity = Severity.MEDIUM
    requires = ("hlo", "memory")
    fix = "donate-state"

    VALID = (
        Example(hlo=(_CACHE_STEP.replace("is_scheduled=true,",
                                         "is_scheduled=true, input_output_alias={ {}: (0, {}, may-alias) },"),),
                memory=_memory(donated=True), note="the cache donated: one buffer"),
        Example(hlo=(_CACHE_STEP.replace("dynamic-update-slice(%p0, %p1, %p2, %z)", "add(%p0, %p0)"),),
                memory=_memory(donated=False), note="a new value of the same shape, not an update"),
    )
    INVALID = (
        Example(hlo=(_CACHE_STEP,), memory=_memory(donated=False), expect=("HD016 update_fusion",),
                note="a KV cache updated and returned without donation"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            pm = ctx.program_memory(m)
            if pm is None:
                continue
            args = {a.parameter_number: a for a in pm.allocations if a.category == "argument"}
            outs = [a for a in pm.allocations if a.category == "output" and a.live_out]
            for param in m.entry.parameters:
                arg = args.get(param.parameter_number)
                if arg is None or arg.live_out or param.shape.is_tuple or arg.size_bytes < MIN_BYTES:
                    continue  # donated (its buffer is an output too), or too small to matter
                for value, label, shape in _outputs(m):
                    if (shape.dtype, shape.dims) != (param.shape.dtype, param.shape.dims):
                        continue
                    out = next((a for a in outs if label in (a.instructions or (a.instruction,))), None)
                    update = _update_from(m, value, param) if out is not None else None
                    if out is None or update is None or out.size_bytes != arg.size_bytes:
                        continue
                    freed = out.size_bytes
                    yield ctx.finding(
                        self, m, value,
                        f"parameter {param.parameter_number} ({param.name}, {param.shape.text(False)}, "
                        f"{fmt_bytes(arg.size_bytes)}) is updated ({update.opcode}) and returned as {label} "
                        f"without donation: {m.name} holds it twice; donated, it frees {fmt_bytes(freed)} of its "
                        f"{fmt_bytes(pm.peak_bytes)} peak{_buys(ctx, freed)} (donate_argnums where {m.name} is "
                        "jitted)",
                        recoverable_fraction=None, source_inst=update,
                        evidence=(param.raw, value.raw),
                        extra=(("freed_bytes", freed), ("peak_bytes", pm.peak_bytes),
                               ("parameter", param.parameter_number), ("parameter_name", param.name)),
                    )
                    break


def _buys(ctx: Context, freed: int) -> str:
    note = ctx.memory.capacity_note(freed) if ctx.memory is not None else ""
    return f": {note}" if note else ""


def _outputs(m: HloModule) -> list[tuple[HloInstruction, str, HloShape]]:
    """The program's array outputs: (the instruction that makes each, its buffer's label), a
    ``get-tuple-element`` followed to the tuple-shaped value it reads (``while.1{1}``)."""
    root = m.entry.root
    leaves = m.operands_of(root) if root.opcode == "tuple" else [root]
    out = []
    for leaf in leaves:
        inst, index = leaf, []
        while inst.opcode == "get-tuple-element":
            ops = m.operands_of(inst)
            if not ops:
                break
            index.insert(0, int(inst.attribute("index", "0") or 0))
            inst = ops[0]
        if inst.opcode in ("tuple", "parameter"):
            continue
        label = inst.name + ("{" + ",".join(str(i) for i in index) + "}" if index else "")
        out.append((inst, label, leaf.shape))
    return out


def _update_from(m: HloModule, out: HloInstruction, param: HloInstruction) -> HloInstruction | None:
    """The in-place-able update on the way from ``param`` to ``out`` (in ``out`` or its fusion
    body), when ``out`` is computed from ``param``; None otherwise."""
    stack, seen = [out], {out.name}
    update: HloInstruction | None = None
    reached = False
    while stack:
        inst = stack.pop()
        if update is None:
            update = _update_in(m, inst)
        for op in m.operands_of(inst):
            if op.name == param.name:
                reached = True
            elif op.name not in seen and op.opcode != "parameter":
                seen.add(op.name)
                stack.append(op)
    return update if reached else None


def _update_in(m: HloModule, inst: HloInstruction) -> HloInstruction | None:
    if inst.opcode in _UPDATES:
        return inst
    body = m.fusion_body(inst)
    if body is not None:
        return next((i for i in body.instructions if i.opcode in _UPDATES), None)
    return None
