"""HD018: a matmul's result held whole at the program's peak where only a slice of it is read."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloInstruction, HloModule, fused_opcodes
from hlo_doctor.hlo.analysis import callers
from hlo_doctor.hlo.result_slices import PartialRead, is_matmul_op, partial_read
from hlo_doctor.lint import (
    Context,
    Example,
    Finding,
    ProgramMemory,
    Rule,
    Severity,
    fmt_bytes,
    peak_with_resized,
)
from hlo_doctor.lint.testing import ARGMAX_REDUCER

THRESHOLD = 0.5
"""Flag a result only when its uses keep less than this fraction of it (HD012's threshold)."""
MIN_BYTES = 64 * 1024
"""Below this the bytes freed are noise next to the rest of the peak."""
# A fusion of these only copies a slice out: its output is the buffer a sliced-first matmul writes.
_COPY_OUT = frozenset({"parameter", "bitcast", "reshape", "slice", "dynamic-slice", "copy", "transpose", "constant"})

# tests/rules/programs/prefill_memory.py (``prefill``), reduced: the LM head over every position, the
# argmax of the last one (the slice fused into it).
_PREFILL = """\
HloModule jit_prefill, is_scheduled=true, entry_computation_layout={(f32[4,16,128]{2,1,0}, f32[128,32000]{1,0})->s32[4]{0}}

%fused_computation (param_0: f32[64,128], param_1: f32[128,32000]) -> f32[64,32000] {
  %param_0 = f32[64,128]{1,0} parameter(0)
  %param_1 = f32[128,32000]{1,0} parameter(1)
  ROOT %dot.1 = f32[64,32000]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(prefill)/dot_general" source_file="prefill.py" source_line=19}
}

""" + ARGMAX_REDUCER + """
%fused_computation.1 (param_0.4: f32[64,32000]) -> (f32[4], s32[4]) {
  %param_0.4 = f32[64,32000]{1,0} parameter(0)
  %bitcast.4 = f32[4,16,32000]{2,1,0} bitcast(%param_0.4)
  %slice.0 = f32[4,1,32000]{2,1,0} slice(%bitcast.4), slice={[0:4], [15:16], [0:32000]}, metadata={op_name="jit(prefill)/slice" source_file="prefill.py" source_line=20}
  %bitcast.3 = f32[4,32000]{1,0} bitcast(%slice.0)
  %iota.5 = s32[4,32000]{1,0} iota(), iota_dimension=1
  %constant.5 = f32[] constant(-inf)
  %constant.4 = s32[] constant(0)
  ROOT %reduce.2 = (f32[4]{0}, s32[4]{0}) reduce(%bitcast.3, %iota.5, %constant.5, %constant.4), dimensions={1}, to_apply=%region_0.1
}

ENTRY %main.3 (h.1: f32[4,16,128], w.1: f32[128,32000]) -> s32[4] {
  %h.1 = f32[4,16,128]{2,1,0} parameter(0), metadata={op_name="h"}
  %w.1 = f32[128,32000]{1,0} parameter(1), metadata={op_name="w"}
  %bitcast = f32[64,128]{1,0} bitcast(%h.1)
  %ynn_fusion = f32[64,32000]{1,0} fusion(%bitcast, %w.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(prefill)/dot_general" source_file="prefill.py" source_line=19}
  %iota_reduce_fusion = (f32[4]{0}, s32[4]{0}) fusion(%ynn_fusion), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(prefill)/reduce" source_file="prefill.py" source_line=20}
  ROOT %reduce.1 = s32[4]{0} get-tuple-element(%iota_reduce_fusion), index=1
}
"""


def _buffer(name: str, size: int, category: str, shape: str, bid: int) -> dict[str, object]:
    return {"logical_buffer_id": bid, "size_bytes": size, "instruction": name, "opcode": "", "shape": shape,
            "category": category}


def _memory(at_peak: bool) -> dict[str, object]:
    w, h, logits = 128 * 32000 * 4, 4 * 16 * 128 * 4, 64 * 32000 * 4
    buffers = [_buffer("w.1", w, "argument", "f32[128,32000]{1,0}", 0),
               _buffer("h.1", h, "argument", "f32[4,16,128]{2,1,0}", 1),
               _buffer("reduce.1", 16, "output", "s32[4]{0}", 2)]
    if at_peak:
        buffers.insert(1, _buffer("ynn_fusion", logits, "temporary", "f32[64,32000]{1,0}", 3))
    peak = sum(int(b["size_bytes"]) for b in buffers)  # type: ignore[call-overload]
    return {"programs": [{"module": "jit_prefill", "peak_bytes": peak, "buffers_at_peak": buffers}]}


class ResultHeldWhole(Rule):
    """A matmul's result held whole at the program's peak where only a slice of it is read.

    What it flags:
        A temporary of 64 KiB or more, live at the program's peak, that is the result of a dot,
        convolution or library matmul (or a fusion holding one) of which every use reads only a
        slice, together less than half of it (the reads HD012 follows): logits computed for every
        prompt position at prefill where the argmax reads the last, a [B,T,V] product sliced to
        [B,V]. Needs the program's buffer assignment (an ``.xplane.pb``).
    Why it costs:
        Device memory: the whole result is live at the peak where the slice would do. Sliced first,
        the program holds the kept part instead (none where a ``slice`` op already copies it out)
        and the rows of the matmul's input the slice keeps (its smaller operand, by the kept
        fraction): the freed bytes are the result's size less those two (the compiled difference
        of the program with the slice before the matmul; within the allocator's 64-byte alignment
        of small buffers around it). Time: the discarded rows are computed too (HD012, where the
        memory half is folded in).
    Example:
        ``jnp.argmax((h @ w)[:, -1], -1)`` with h f32[4,16,128] and w f32[128,32000]: the logits of all
        16 positions (7.8 MiB) live at the peak, 1/16 of them read.
    Fix:
        Slice the input before the matmul: ``h[:, -1:] @ w`` (for a model, apply the LM head to the
        last position's hidden state only).
    """

    code = "HD018"
    name = "memory.result-held-whole"
    severity = Severity.MEDIUM
    requires = ("hlo", "memory")
    fix = "slice-before-matmul"

    VALID = (
        Example(hlo=(_PREFILL.replace("slice={[0:4], [15:16], [0:32000]}", "slice={[0:4], [0:16], [0:32000]}")
                     .replace("f32[4,1,32000]{2,1,0} slice", "f32[4,16,32000]{2,1,0} slice"),),
                memory=_memory(at_peak=True), note="every position read: nothing discarded"),
        Example(hlo=(_PREFILL,), memory=_memory(at_peak=False), note="the logits not live at the peak"),
    )
    INVALID = (
        Example(hlo=(_PREFILL,), memory=_memory(at_peak=True), expect=("HD018 ynn_fusion",),
                note="the LM head over 16 positions at the peak, the last one read"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            pm = ctx.program_memory(m)
            if pm is None:
                continue
            by_comp = callers(m)
            for b in pm.buffers_at_peak:
                if b.category != "temporary" or b.size_bytes < MIN_BYTES or "{" in b.instruction:
                    continue
                op = m.instruction(b.instruction)
                if op is None or op.shape.is_tuple or not is_matmul_op(m, op):
                    continue
                caller = by_comp.get(op.computation)
                if op.computation != m.entry_name and (caller is None or caller.opcode != "while"):
                    continue
                read = partial_read(m, op)
                if read is None or read.kept_fraction >= THRESHOLD:
                    continue
                freed, kept, rows = _freed(m, pm, op, read, b.size_bytes)
                if freed < MIN_BYTES:
                    continue
                yield self._finding(ctx, m, pm, op, read, b.size_bytes, freed, kept, rows)

    def _finding(self, ctx: Context, m: HloModule, pm: ProgramMemory, op: HloInstruction, read: PartialRead,
                 size: int, freed: int, kept: int, rows: int) -> Finding:
        note = ctx.memory.capacity_note(freed) if ctx.memory is not None else ""
        slice_src = read.reads[0]
        return ctx.finding(
            self, m, op,
            f"{op.name} ({op.shape.text(False)}, {fmt_bytes(size)}) is live whole at {m.name}'s peak and "
            f"{'its uses read' if len(read.reads) > 1 else 'its one use reads'} {read.kept:,} of its "
            f"{read.total:,} elements ({100 * read.kept_fraction:.3g}%): slicing the input before the matmul "
            f"frees {fmt_bytes(freed)} of the {fmt_bytes(pm.peak_bytes)} peak"
            f"{f' ({note})' if note else ''}{_holds(kept, rows)}",
            source_inst=None, evidence=(op.raw, slice_src.raw),
            extra=(("freed_bytes", freed), ("peak_bytes", pm.peak_bytes), ("result_bytes", size),
                   ("kept_bytes", kept), ("sliced_input_bytes", rows), ("kept_fraction", read.kept_fraction)),
        )


def _holds(kept: int, rows: int) -> str:
    held = [f"{fmt_bytes(kept)} of result" if kept else "", f"{fmt_bytes(rows)} of sliced input" if rows else ""]
    shown = " and ".join(h for h in held if h)
    return f" (it then holds {shown})" if shown else ""


def _freed(m: HloModule, pm: ProgramMemory, op: HloInstruction, read: PartialRead,
           size: int) -> tuple[int, int, int]:
    """(freed, kept result bytes, sliced input bytes). Sliced first, the program holds a kept-size
    result where a slice is read by other work (fused into an argmax), none where a slice only copies
    its part out (a level ``slice``, a fusion of slicing and moves: the matmul writes that buffer
    directly), and the sliced input as the matmul is made. Freed: the peak less the peak of the heap
    replayed so (the peak may move elsewhere); without a heap, the result's size less both."""
    by_comp = callers(m)
    kept = 0
    for r in read.reads:
        caller = by_comp.get(r.computation)
        if r.computation == m.entry_name or (caller is not None and caller.opcode == "fusion"
                                             and set(fused_opcodes(m, caller)) <= _COPY_OUT):
            continue
        kept += size * min(r.shape.num_elements, read.total) // read.total
    operands = [o for o in m.operands_of(op) if not o.shape.is_tuple]
    smaller = min((o.shape.nbytes for o in operands), default=0)
    rows = smaller * read.kept // read.total
    after = peak_with_resized(pm, op.name, size, kept, beside=rows)
    return (pm.peak_bytes - after if after is not None else size - kept - rows), kept, rows
