"""HD019: a weight re-laid-out or converted on every call, the copy live at the program's peak."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloInstruction, HloModule, fused_opcodes
from hlo_doctor.hlo.result_slices import is_matmul_op
from hlo_doctor.hlo.weights import weight_parameters
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

MIN_BYTES = 64 * 1024
"""Below this a weight's copy is noise next to the rest of the peak."""
# Ops that only move or convert a value: a copy of the weight in another layout or dtype.
_MOVE = frozenset({"parameter", "bitcast", "reshape", "transpose", "copy", "convert"})

# tests/rules/programs/weight_copy.py (``step``): a weight whose halves are interleaved on every call
# (a fused projection's rows reordered) before the matmul reads it.
_REORDER = """\
HloModule jit_project, is_scheduled=true, entry_computation_layout={(f32[16,512]{1,0}, f32[512,1024]{1,0})->f32[16,1024]{1,0}}

%fused_computation (param_0: f32[16,512], param_1: f32[512,1024]) -> f32[16,1024] {
  %param_0 = f32[16,512]{1,0} parameter(0)
  %param_1 = f32[512,1024]{1,0} parameter(1)
  ROOT %dot_general.0 = f32[16,1024]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(project)/dot_general" source_file="project.py" source_line=12}
}

%fused_computation.1 (param_0.1: f32[512,1024]) -> f32[512,1024] {
  %param_0.1 = f32[512,1024]{1,0} parameter(0)
  %bitcast.1 = f32[2,256,1024]{2,1,0} bitcast(%param_0.1)
  %transpose.1 = f32[256,2,1024]{2,1,0} transpose(%bitcast.1), dimensions={1,0,2}, metadata={op_name="jit(project)/transpose" source_file="project.py" source_line=11}
  ROOT %bitcast.2 = f32[512,1024]{1,0} bitcast(%transpose.1)
}

ENTRY %main.1 (x.1: f32[16,512], w.1: f32[512,1024]) -> f32[16,1024] {
  %x.1 = f32[16,512]{1,0} parameter(0), metadata={op_name="x"}
  %w.1 = f32[512,1024]{1,0} parameter(1), metadata={op_name="w"}
  %copy_bitcast_fusion = f32[512,1024]{1,0} fusion(%w.1), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(project)/transpose" source_file="project.py" source_line=11}
  ROOT %ynn_fusion = f32[16,1024]{1,0} fusion(%x.1, %copy_bitcast_fusion), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(project)/dot_general" source_file="project.py" source_line=12}
}
"""


def _buffer(name: str, size: int, category: str, shape: str, bid: int) -> dict[str, object]:
    return {"logical_buffer_id": bid, "size_bytes": size, "instruction": name, "opcode": "", "shape": shape,
            "category": category}


def _memory(copy_bytes: int) -> dict[str, object]:
    w = 512 * 1024 * 4
    buffers = [_buffer("w.1", w, "argument", "f32[512,1024]{1,0}", 0),
               _buffer("copy_bitcast_fusion", copy_bytes, "temporary", "f32[512,1024]{1,0}", 1),
               _buffer("x.1", 16 * 512 * 4, "argument", "f32[16,512]{1,0}", 2),
               _buffer("ynn_fusion", 16 * 1024 * 4, "output", "f32[16,1024]{1,0}", 3)]
    peak = sum(int(b["size_bytes"]) for b in buffers)  # type: ignore[call-overload]
    return {"programs": [{"module": "jit_project", "peak_bytes": peak, "buffers_at_peak": buffers}]}


class WeightCopiedPerCall(Rule):
    """A weight re-laid-out or converted on every call, the copy live at the program's peak.

    What it flags:
        A temporary of 64 KiB or more, live at the program's peak, made from one entry parameter that
        is a weight (``hlo/weights.py``: contracted by a matmul, never donated or updated) by data
        movement and converts alone (a ``transpose``, ``copy``, ``convert``, or a fusion of only
        those), and read by a matmul: the weight stored in one layout or dtype and used in another,
        remade on every call. Needs the program's buffer assignment (an ``.xplane.pb``).
    Why it costs:
        Device memory: the weight is held twice at the peak, as stored and as read. Stored once as
        the program reads it (the copy's layout and dtype), the program holds that alone: the freed
        bytes are the stored weight's size (the copy's size, less what storing it wider adds to the
        arguments; the compiled difference of arguments, outputs and temporaries). Time: the copy is
        remade on every call (HD014, where the memory half is folded in).
    Example:
        ``x @ w.reshape(2, 256, 1024).transpose(1, 0, 2).reshape(512, 1024)``: the reordered f32[512,1024]
        (2 MiB) made on every call, live beside ``w`` at the peak.
    Fix:
        Store the weight as the program reads it: do the transpose, reorder or ``astype`` once, when
        the parameters are loaded, and pass the result.
    """

    code = "HD019"
    name = "memory.weight-copied-per-call"
    severity = Severity.MEDIUM
    requires = ("hlo", "memory")

    VALID = (
        Example(hlo=(_REORDER,), memory=_memory(1024), note="a copy too small to matter"),
        Example(hlo=(_REORDER.replace("ROOT %ynn_fusion = f32[16,1024]{1,0} fusion(%x.1, %copy_bitcast_fusion)",
                                      "ROOT %ynn_fusion = f32[16,1024]{1,0} fusion(%x.1, %w.1)"),),
                memory=_memory(512 * 1024 * 4), note="the copy is not what the matmul reads"),
    )
    INVALID = (
        Example(hlo=(_REORDER,), memory=_memory(512 * 1024 * 4), expect=("HD019 copy_bitcast_fusion",),
                note="a weight reordered on every call, both copies at the peak"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            pm = ctx.program_memory(m)
            if pm is None:
                continue
            weights: dict[int, object] | None = None
            args = {b.parameter_number: b for b in pm.buffers_at_peak if b.category == "argument"}
            for b in pm.buffers_at_peak:
                if b.category != "temporary" or b.size_bytes < MIN_BYTES or "{" in b.instruction:
                    continue
                op = m.instruction(b.instruction)
                if op is None or op.computation != m.entry_name or op.shape.is_tuple or not _moves_only(m, op):
                    continue
                param = _source_parameter(m, op)
                if param is None or param.parameter_number is None:
                    continue
                if weights is None:
                    weights = dict(weight_parameters(m))
                if param.parameter_number not in weights or not any(is_matmul_op(m, u) for u in m.users_of(op)):
                    continue
                arg = args.get(param.parameter_number)
                stored = arg.size_bytes if arg is not None else param.shape.nbytes
                yield self._finding(ctx, m, pm, op, param, b.size_bytes, stored)

    def _finding(self, ctx: Context, m: HloModule, pm: ProgramMemory, op: HloInstruction, param: HloInstruction,
                 size: int, stored: int) -> Finding:
        # Stored as read, the program holds the copy's bytes as its argument and no copy: the heap
        # replayed without it (the peak may move elsewhere), the argument grown or shrunk to its size.
        after = peak_with_resized(pm, op.name, size, 0)
        freed = (pm.peak_bytes - after if after is not None else size) - (size - stored)
        how = _how(m, op, param)
        note = ctx.memory.capacity_note(freed) if ctx.memory is not None else ""
        return ctx.finding(
            self, m, op,
            f"{op.name} ({op.shape.text(False)}, {fmt_bytes(size)}) is weight {param.name} "
            f"({param.shape.text(False)}) {how} on every call, live beside it at {m.name}'s peak: stored as "
            f"the matmul reads it, the program frees {fmt_bytes(freed)} of its {fmt_bytes(pm.peak_bytes)} peak"
            f"{f' ({note})' if note else ''}"
            f"{f' (the copy less the {fmt_bytes(size - stored)} storing it so adds)' if size > stored else ''}",
            evidence=(param.raw, op.raw),
            extra=(("freed_bytes", freed), ("peak_bytes", pm.peak_bytes), ("copy_bytes", size),
                   ("weight", param.name), ("parameter", param.parameter_number)),
        )


def _moves_only(m: HloModule, op: HloInstruction) -> bool:
    if op.opcode in ("transpose", "copy", "convert"):
        return True
    if op.opcode != "fusion":
        return False
    ops = fused_opcodes(m, op)
    return bool(ops) and all(o in _MOVE for o in ops) and any(o in ("transpose", "copy", "convert") for o in ops)


def _source_parameter(m: HloModule, op: HloInstruction) -> HloInstruction | None:
    """The entry parameter ``op`` moves (through bitcasts), when it reads exactly one."""
    ops = [o for o in m.operands_of(op)]
    if len(ops) != 1:
        return None
    src = ops[0]
    for _ in range(16):
        if src.opcode != "bitcast":
            break
        nxt = m.operands_of(src)
        if not nxt:
            return None
        src = nxt[0]
    return src if src.opcode == "parameter" and src.computation == m.entry_name else None


def _how(m: HloModule, op: HloInstruction, param: HloInstruction) -> str:
    kinds = set(fused_opcodes(m, op)) if op.opcode == "fusion" else {op.opcode}
    parts = []
    if "transpose" in kinds or "copy" in kinds:
        parts.append("re-laid-out")
    if "convert" in kinds or op.shape.dtype != param.shape.dtype:
        parts.append(f"converted to {op.shape.dtype}")
    return " and ".join(parts) or "copied"
