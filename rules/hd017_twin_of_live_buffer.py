"""HD017: a copied or widened twin of a buffer that is live beside it at the program's peak."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import DTYPE_BITS, HloInstruction, HloModule, is_convert_only
from hlo_doctor.hlo.analysis import is_exact_widening
from hlo_doctor.hlo.result_slices import is_matmul_op
from hlo_doctor.lint import (
    Context,
    Example,
    Finding,
    ProgramMemory,
    Rule,
    Severity,
    fmt_bytes,
    peak_with,
    producing_convert_program,
)

# Below this a twin is noise next to the rest of the peak.
MIN_BYTES = 64 * 1024
# Ops XLA:CPU computes in f32 whatever the dtype it is given: a bf16/f16 operand it widens itself.
_CPU_WIDENS = frozenset({"dot", "sort", "custom-call", "convolution"})

_SAMPLE = """\
HloModule jit_sample, entry_computation_layout={(f32[64,1024]{1,0})->(s32[64]{0}, f32[64,1024]{1,0})}

%region_0.1 (a: f32[], b: s32[], c: f32[], d: s32[]) -> (f32[], s32[]) {
  %a = f32[] parameter(0)
  %b = s32[] parameter(1)
  %c = f32[] parameter(2)
  %d = s32[] parameter(3)
  %gt = pred[] compare(%a, %c), direction=GT
  %sel = f32[] select(%gt, %a, %c)
  %seli = s32[] select(%gt, %b, %d)
  ROOT %t = (f32[], s32[]) tuple(%sel, %seli)
}

%fused_computation (param_0: f32[64,1024]) -> (f32[64], s32[64]) {
  %param_0 = f32[64,1024]{1,0} parameter(0)
  %iota.5 = s32[64,1024]{1,0} iota(), iota_dimension=1
  %constant.5 = f32[] constant(-inf)
  %constant.4 = s32[] constant(0)
  ROOT %reduce.2 = (f32[64]{0}, s32[64]{0}) reduce(%param_0, %iota.5, %constant.5, %constant.4), dimensions={1}, to_apply=%region_0.1, metadata={op_name="jit(sample)/argmax" source_file="sampling.py" source_line=105}
}

ENTRY %main.3 (logits.1: f32[64,1024]) -> (s32[64], f32[64,1024]) {
  %logits.1 = f32[64,1024]{1,0} parameter(0), metadata={op_name="logits"}
  %iota_reduce_fusion = (f32[64]{0}, s32[64]{0}) fusion(%logits.1), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(sample)/argmax" source_file="sampling.py" source_line=105}
  %copy = f32[64,1024]{1,0} copy(%logits.1)
  %gte = s32[64]{0} get-tuple-element(%iota_reduce_fusion), index=1
  ROOT %tuple = (s32[64]{0}, f32[64,1024]{1,0}) tuple(%gte, %copy)
}
"""


def _peak(name: str, size: int, category: str, opcode: str, shape: str, bid: int) -> dict[str, object]:
    return {"logical_buffer_id": bid, "size_bytes": size, "instruction": name, "opcode": opcode, "shape": shape,
            "category": category}


def _memory(copy_bytes: int) -> dict[str, object]:
    logits = 64 * 1024 * 4
    buffers = [_peak("logits.1", logits, "argument", "parameter", "f32[64,1024]{1,0}", 0),
               _peak("copy", copy_bytes, "output", "copy", "f32[64,1024]{1,0}", 1),
               _peak("iota_reduce_fusion{1}", 256, "output", "fusion", "s32[64]{0}", 2),
               _peak("tuple", 16, "output", "tuple", "(s32[64]{0}, f32[64,1024]{1,0})", 3)]
    peak = logits + copy_bytes + 256 + 16
    return {"programs": [{"module": "jit_sample", "peak_bytes": peak, "buffers_at_peak": buffers}]}


class TwinOfLiveBuffer(Rule):
    """A copied or widened twin of a buffer that is live beside it at the program's peak.

    What it flags:
        In the buffer assignment, an output of 64 KiB or more that is a ``copy`` (same layout) or a
        widening ``convert`` of another buffer live at the program's peak beside it:
        the input returned as a copy (the seed's greedy ``sample()`` returning its logits), or a
        widened result returned beside its narrow source. Also an argument that is the f32 twin of
        a narrower value, widened by a separate convert program before the call (an eager
        ``astype``): the program holds the wide copy where the narrow one would do. And a temporary
        live at the peak that is such a copy or exact widening (integers too) of a buffer beside it:
        int8 scores widened to int32 before a sort; not a bf16/f16 value XLA:CPU widens itself for a
        dot, sort or custom call. Needs the program's buffer assignment (an ``.xplane.pb``).
    Why it costs:
        Device memory: the twin adds its whole size to the peak, and its slot in the output tuple; a
        temporary twin, what the heap replayed without it (its readers of its shape and width at the
        narrow width) saves; a wide argument costs the difference to the narrow one in this program, and
        the step also holds the convert program's output meanwhile. Time: the copy or widening
        reads and writes every byte (HD002, HD003 report that half).
    Example:
        ``return tokens, logits`` in a jitted sampler: output ``copy`` of argument ``logits.1``,
        both f32[64,256000] (62.5 MiB each) at the peak.
    Fix:
        Return only what the caller reads (the tokens), or donate the input it returns; pass the
        narrow value and widen inside the program where a wide one is needed; sort or select on
        the narrow value and widen what is kept.
    """

    code = "HD017"
    name = "memory.twin-of-live-buffer"
    severity = Severity.MEDIUM
    requires = ("hlo", "memory")

    VALID = (
        Example(hlo=(_SAMPLE.replace("%copy = f32[64,1024]{1,0} copy(%logits.1)",
                                     "%copy = f32[64,1024]{0,1} copy(%logits.1)"),),
                memory=_memory(64 * 1024 * 4), note="a re-laid-out copy (not a twin)"),
        Example(hlo=(_SAMPLE,), memory=_memory(1024), note="a twin too small to matter"),
    )
    INVALID = (
        Example(hlo=(_SAMPLE,), memory=_memory(64 * 1024 * 4), expect=("HD017 copy",),
                note="the sampler returns its input: a copy live beside it"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            pm = ctx.program_memory(m)
            if pm is None:
                continue
            live = {b.instruction for b in pm.buffers_at_peak}
            for b in pm.buffers_at_peak:
                # Outputs only: a widened temporary is usually the backend's own (XLA:CPU widens a bf16
                # operand of a dot, which no source edit avoids), and its freed bytes would be a model.
                if b.category != "output" or b.size_bytes < MIN_BYTES:
                    continue
                inst = m.instruction(b.instruction.split("{")[0])
                source = _twin_source(m, inst) if inst is not None and not inst.shape.is_tuple else None
                if inst is None or source is None or source.name not in live:
                    continue
                freed = b.size_bytes + (_tuple_share(m, pm) if b.category == "output" else 0)
                how = "copy" if inst.opcode == "copy" else f"widening to {inst.dtype}"
                yield ctx.finding(
                    self, m, inst,
                    f"{b.instruction} ({b.shape.split('{')[0]}, {fmt_bytes(b.size_bytes)}, {b.category}) is a {how} "
                    f"of {source.name}, live beside it at {m.name}'s peak: not making it frees {fmt_bytes(freed)} of "
                    f"the {fmt_bytes(pm.peak_bytes)} peak{_buys(ctx, freed)}",
                    source_inst=source if inst.opcode == "copy" and source.source else inst,
                    evidence=(source.raw, inst.raw),
                    extra=(("freed_bytes", freed), ("peak_bytes", pm.peak_bytes), ("twin_of", source.name)),
                )
            yield from self._wide_arguments(ctx, m, pm)
            yield from self._temporaries(ctx, m, pm, live)

    def _temporaries(self, ctx: Context, m: HloModule, pm: ProgramMemory, live: set[str]) -> Iterator[Finding]:
        cpu = ctx.memory is not None and ctx.memory.backend == "cpu"
        for b in pm.buffers_at_peak:
            if b.category != "temporary" or b.size_bytes < MIN_BYTES or "{" in b.instruction:
                continue
            inst = m.instruction(b.instruction)
            if inst is None or inst.shape.is_tuple or inst.computation != m.entry_name:
                continue
            source = _twin_source(m, inst)
            if source is None or source.name not in live or (cpu and _backend_widening(m, inst, source)):
                continue
            # Without the twin its readers work on the source: a copy is not made; a widening's readers
            # of its shape and width (a sort) hold values of the narrow width, widened after.
            bits = source.shape.element_bits, inst.shape.element_bits
            narrow = 0 if inst.opcode == "copy" else b.size_bytes * bits[0] // bits[1]
            changes = [(inst.name, b.size_bytes, narrow)]
            if inst.opcode != "copy":
                changes += [(u.name, u.shape.nbytes, u.shape.nbytes * bits[0] // bits[1]) for u in _wide_readers(m, inst)]
            after = peak_with(pm, changes)
            freed = pm.peak_bytes - after if after is not None else b.size_bytes - narrow
            if freed < MIN_BYTES:
                continue
            how = "copy" if inst.opcode == "copy" else f"widening to {inst.dtype}"
            yield ctx.finding(
                self, m, inst,
                f"{b.instruction} ({b.shape.split('{')[0]}, {fmt_bytes(b.size_bytes)}, temporary) is a {how} of "
                f"{source.name}, live beside it at {m.name}'s peak: working on {source.name} "
                f"{'directly' if inst.opcode == 'copy' else 'and widening the result'} frees {fmt_bytes(freed)} "
                f"of the {fmt_bytes(pm.peak_bytes)} peak{_buys(ctx, freed)}",
                evidence=(source.raw, inst.raw),
                extra=(("freed_bytes", freed), ("peak_bytes", pm.peak_bytes), ("twin_of", source.name)),
            )

    def _wide_arguments(self, ctx: Context, m: HloModule, pm: ProgramMemory) -> Iterator[Finding]:
        peak = pm.peak_bytes
        for b in pm.buffers_at_peak:
            if b.category != "argument" or b.size_bytes < MIN_BYTES:
                continue
            param = m.instruction(b.instruction)
            prog = producing_convert_program(ctx, m, param) if param is not None else None
            if param is None or prog is None:
                continue
            narrow_bits, wide_bits = DTYPE_BITS.get(prog.narrow, 0), DTYPE_BITS.get(param.dtype, 0)
            if not narrow_bits or wide_bits <= narrow_bits:
                continue
            freed = b.size_bytes - b.size_bytes * narrow_bits // wide_bits
            yield ctx.finding(
                self, m, param,
                f"argument {param.name} ({b.shape.split('{')[0]}, {fmt_bytes(b.size_bytes)}) is the {param.dtype} twin "
                f"of a {prog.narrow} value widened by program {prog.module.name} before the call: taking the "
                f"{prog.narrow} value frees {fmt_bytes(freed)} of {m.name}'s {fmt_bytes(peak)} peak{_buys(ctx, freed)}, "
                f"and the step stops holding the {fmt_bytes(b.size_bytes)} twin {prog.module.name} makes",
                source_inst=prog.convert, evidence=(prog.op.raw, param.raw),
                extra=(("freed_bytes", freed), ("peak_bytes", peak), ("twin_bytes", b.size_bytes),
                       ("widened_by", prog.module.name)),
            )


def _buys(ctx: Context, freed: int) -> str:
    note = ctx.memory.capacity_note(freed) if ctx.memory is not None else ""
    return f" ({note})" if note else ""


def _wide_readers(m: HloModule, inst: HloInstruction) -> list[HloInstruction]:
    """The level ops after ``inst`` that keep its shape and width (a sort of the widened value), up to
    a few steps: each would hold the narrow value without the widening."""
    out: list[HloInstruction] = []
    frontier = [inst]
    for _ in range(4):
        frontier = [u for v in frontier for u in m.users_of(v) if not u.shape.is_tuple
                    and u.shape.dims == inst.shape.dims and u.dtype == inst.dtype and u.computation == m.entry_name]
        out.extend(frontier)
    return list({u.name: u for u in out}.values())


def _backend_widening(m: HloModule, inst: HloInstruction, source: HloInstruction) -> bool:
    """A bf16/f16 value widened for readers XLA:CPU computes in f32 anyway: the backend's own."""
    if inst.opcode == "copy" or source.dtype not in ("bf16", "f16"):
        return False
    users = m.users_of(inst)
    return bool(users) and all(u.opcode in _CPU_WIDENS or is_matmul_op(m, u) for u in users)


def _twin_source(m: HloModule, inst: HloInstruction) -> HloInstruction | None:
    """The buffer ``inst`` is a same-layout copy or an exact widening of; None otherwise."""
    ops = m.operands_of(inst)
    if len(ops) != 1 or ops[0].shape.is_tuple or ops[0].shape.dims != inst.shape.dims:
        return None
    src = _through_plumbing(m, ops[0])
    if inst.opcode == "copy":
        return src if src.shape.layout == inst.shape.layout else None
    if is_convert_only(m, inst) and (is_exact_widening(src.dtype, inst.dtype) or _int_widening(src.dtype, inst.dtype)):
        return src
    return None


def _int_widening(src: str, dst: str) -> bool:
    """An integer widened exactly: to a wider integer of the same signedness, or unsigned to a wider signed."""
    if src[:1] not in ("s", "u") or dst[:1] not in ("s", "u") or not src[1:].isdigit() or not dst[1:].isdigit():
        return False
    if src[0] == "s" and dst[0] == "u":
        return False
    return int(dst[1:]) > int(src[1:])


def _through_plumbing(m: HloModule, inst: HloInstruction) -> HloInstruction:
    """The value ``inst`` forwards: a tuple's element read back (XLA:GPU's ``get-tuple-element`` of a
    ``tuple``), a ``bitcast``; ``inst`` itself otherwise."""
    for _ in range(32):
        ops = m.operands_of(inst)
        if inst.opcode == "bitcast" and ops:
            inst = ops[0]
        elif inst.opcode == "get-tuple-element" and ops and ops[0].opcode == "tuple":
            index = int(inst.attribute("index", "0") or 0)
            elements = m.operands_of(ops[0])
            if index >= len(elements):
                break
            inst = elements[index]
        else:
            break
    return inst


def _tuple_share(m: HloModule, pm: ProgramMemory) -> int:
    """The output tuple's bytes that go with one of its elements: its pointer, or the whole tuple
    when one element would be left (the program then returns that array alone)."""
    root = m.entry.root
    if root.opcode != "tuple" or len(root.operands) < 2:
        return 0
    size = next((b.size_bytes for b in pm.buffers_at_peak if b.instruction == root.name), 0)
    return size if len(root.operands) == 2 else size // len(root.operands)
