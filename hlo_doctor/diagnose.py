"""Diagnose: apply the rules to the HLO modules and op stats of a run.

Stage boundaries: :func:`load_context` reads an input (run directory, ``.xplane.pb``, ``opstats.json``
folder, ``--xla_dump_to`` folder or one HLO text file) into a :class:`Context`; :func:`diagnose` runs
rules over it and returns a :class:`Diagnosis` (findings + summary). Nothing here prints.

How a finding gets its time: a rule finds instructions in the HLO, then :meth:`Context.finding`
joins the entry-level op that holds them (a fused instruction is timed through its fusion) to the
op-stats rows by (module, program id, op name). Without op stats a finding carries no time.

The summary's recoverable time counts each op once, even when two rules flag it (the larger
estimate wins).
"""

from __future__ import annotations

import math
import re
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.hlo import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    HloInstruction,
    HloModule,
    HloShape,
    fused_opcodes,
    is_convert_only,
    parse_modules,
    real_work,
)
from hlo_doctor.rulebook import Example, LoadedRule, RuleBook
from hlo_doctor.trace import CompileEvent

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True)
class OpTiming:
    """What the op-stats table says about one op (summed over its rows)."""

    time_per_step_us: float
    pct_of_step: float | None
    occurrences: int
    bytes_accessed: int | None
    source: str = ""


@dataclass(frozen=True, slots=True, eq=False)
class Context:
    """Everything a rule may look at. Built once per input; rules must not modify it.

    ``table`` is the op-stats table (columns: :data:`hlo_doctor.opstats.COLUMNS`) or None for an
    HLO-only input; ``source_root`` is the tree given with ``--source`` (source rules).
    """

    modules: tuple[HloModule, ...] = ()
    table: pd.DataFrame | None = None
    step_time_us: float | None = None
    num_steps: int = 0
    compile_events: tuple[CompileEvent, ...] = ()
    source_root: Path | None = None
    backend: str = ""
    origin: str = ""
    kind: str = ""
    """``run``, ``xplane``, ``opstats``, ``xla-dump``, ``hlo`` or ``example``."""
    # A memo of :meth:`callers` per module (the one mutable part: a cache, never read by rules).
    _callers: dict[int, dict[str, HloInstruction]] = field(default_factory=dict, repr=False)

    # -- what is available ------------------------------------------------------------------------

    @property
    def has_opstats(self) -> bool:
        return self.table is not None and len(self.table) > 0

    def provides(self, requirement: str) -> bool:
        """Whether the input has what a rule ``requires`` (``hlo``, ``opstats``, ``source``)."""
        if requirement == "hlo":
            return bool(self.modules)
        if requirement == "opstats":
            return self.has_opstats or bool(self.compile_events)
        if requirement == "source":
            return self.source_root is not None
        return False

    # -- HLO navigation -----------------------------------------------------------------------------

    def callers(self, module: HloModule) -> dict[str, HloInstruction]:
        """Computation name -> the instruction that calls it (fusion, reduce, while...)."""
        key = id(module)
        if key not in self._callers:
            out: dict[str, HloInstruction] = {}
            for inst in module.instructions():
                for c in inst.called_computations:
                    out.setdefault(c, inst)
            self._callers[key] = out
        return self._callers[key]

    def entry_op(self, module: HloModule, inst: HloInstruction) -> HloInstruction:
        """The entry-computation instruction that executes ``inst`` (itself, or its outer fusion)."""
        callers = self.callers(module)
        cur = inst
        seen: set[str] = set()
        while cur.computation != module.entry_name and cur.computation not in seen:
            seen.add(cur.computation)
            caller = callers.get(cur.computation)
            if caller is None:
                break
            cur = caller
        return cur

    # -- op stats join ---------------------------------------------------------------------------------

    def op_timing(self, module: HloModule | str, op: str, program_id: int | None = None) -> OpTiming | None:
        """Op-stats figures of ``op`` in ``module`` (by name, and program id when both sides know it)."""
        if not self.has_opstats:
            return None
        assert self.table is not None
        name = module if isinstance(module, str) else module.name
        if program_id is None and not isinstance(module, str):
            program_id = module.program_id
        t = self.table
        rows = t[(t["module"] == name) & (t["op"] == op)]
        if program_id is not None and len(rows) and "program_id" in rows:
            with_id = rows[rows["program_id"].astype("Int64") == program_id]
            if len(with_id):
                rows = with_id
        if not len(rows):
            return None
        tps = float(rows["time_per_step_us"].fillna(0).sum())
        pct_col = rows["pct_of_step"] if "pct_of_step" in rows else None
        if self.step_time_us:
            pct: float | None = 100.0 * tps / self.step_time_us
        elif pct_col is not None and pct_col.notna().any():
            pct = float(pct_col.fillna(0).sum())
        else:
            pct = None
        ba = rows["bytes_accessed"] if "bytes_accessed" in rows else None
        bytes_accessed = int(ba.dropna().iloc[0]) if ba is not None and ba.notna().any() else None
        sources = [str(v) for v in rows["source"].dropna()] if "source" in rows else []
        return OpTiming(tps, pct, int(rows["occurrences"].fillna(0).sum()), bytes_accessed,
                        next((s for s in sources if s), ""))

    def module_rows(self, module: HloModule | str) -> pd.DataFrame | None:
        """The op-stats rows of one module (by name and, when known, program id)."""
        if not self.has_opstats:
            return None
        assert self.table is not None
        name = module if isinstance(module, str) else module.name
        t = self.table
        rows = t[t["module"] == name]
        pid = None if isinstance(module, str) else module.program_id
        if pid is not None and len(rows):
            with_id = rows[rows["program_id"].astype("Int64") == pid]
            if len(with_id):
                rows = with_id
        return rows

    def finding(
        self,
        rule: type[Any] | Any,
        module: HloModule | None,
        inst: HloInstruction | None,
        message: str,
        *,
        recoverable_fraction: float | None = None,
        evidence: Sequence[str] = (),
        fix: str | None = None,
        extra: Iterable[tuple[str, Any]] = (),
        severity: Severity | None = None,
        source_inst: HloInstruction | None = None,
        bytes_accessed: int | None = None,
    ) -> Finding:
        """A finding on ``inst`` with its time joined from the op stats.

        ``inst`` may be a fused instruction: the time is that of the entry-level op executing it.
        ``recoverable_fraction`` of that time is what a fix is expected to get back (None: unknown).
        """
        op = self.entry_op(module, inst) if module is not None and inst is not None else None
        timing = self.op_timing(module, op.name) if module is not None and op is not None else None
        src_inst = source_inst or inst
        source = (src_inst.source if src_inst is not None else "") or (op.source if op else "")
        if not source and timing is not None:
            source = timing.source
        recoverable = None
        if timing is not None and recoverable_fraction is not None:
            recoverable = timing.time_per_step_us * max(0.0, min(1.0, recoverable_fraction))
        if bytes_accessed is None and op is not None:
            bytes_accessed = timing.bytes_accessed if timing and timing.bytes_accessed else _op_bytes(module, op)
        return Finding(
            code=rule.code, name=rule.name, severity=severity or rule.severity, message=message,
            module=module.name if module is not None else "", op=op.name if op is not None else "",
            shape=op.shape.text() if op is not None else "",
            program_id=module.program_id if module is not None else None,
            time_per_step_us=timing.time_per_step_us if timing else None,
            pct_of_step=timing.pct_of_step if timing else None,
            bytes_accessed=bytes_accessed, recoverable_us=recoverable, source=source,
            evidence=tuple(evidence), fix=rule.fix if fix is None else fix, extra=tuple(extra),
        )


def _op_bytes(module: HloModule | None, op: HloInstruction) -> int | None:
    if module is None:
        return None
    return sum(o.shape.nbytes for o in module.operands_of(op)) + op.shape.nbytes


# -------------------------------------------------------------------------------------------------
# HLO analysis the rules share
# -------------------------------------------------------------------------------------------------

# Data movement commutes with an elementwise convert: a value passing through these is the same
# value for the question "could this have stayed narrow?".
PASS_THROUGH_OPCODES = frozenset({
    "bitcast", "reshape", "copy", "transpose", "broadcast", "slice", "get-tuple-element", "tuple",
    "dynamic-slice", "copy-start", "copy-done", "optimization-barrier", "opt-barrier",
})
# A reducer made only of these selects one of its inputs: max, min, argmax, argmin. Its result does
# not depend on the precision of an exact widening. ``convert`` is allowed because XLA:CPU widens
# bf16 inside reducers itself.
_SELECTION_OPCODES = frozenset({
    "maximum", "minimum", "compare", "select", "and", "or", "not", "convert", "parameter", "tuple",
    "constant",
})


@dataclass(frozen=True, slots=True)
class ValueUse:
    """Where a value ends up: an order-invariant reduce, the program's output, or anything else."""

    kind: str
    """``reduce``, ``output`` or ``other``."""
    inst: HloInstruction


def is_exact_widening(src: str, dst: str) -> bool:
    """True when converting ``src`` to ``dst`` is exact (a wider float type holds every value)."""
    if src not in FLOAT_DTYPES or dst not in FLOAT_DTYPES or src == dst:
        return False
    if {src, dst} == {"f16", "bf16"}:
        return False  # neither holds the other
    return DTYPE_BYTES.get(dst, 0) > DTYPE_BYTES.get(src, 0)


def selection_reduce_kind(module: HloModule, inst: HloInstruction) -> str:
    """``argmax``/``argmin``/``max``/``min``/``top-k`` for an order-invariant reduction, else ``""``."""
    if inst.opcode == "topk" or (inst.opcode == "custom-call" and "topk" in
                                 inst.attribute("custom_call_target").lower()):
        return "top-k"
    if inst.opcode != "reduce" or not inst.called_computations:
        return ""
    reducer = module.computation(inst.called_computations[0])
    if reducer is None:
        return ""
    ops = {i.opcode for i in reducer.instructions}
    if not ops <= _SELECTION_OPCODES:
        return ""
    n_inputs = len(inst.operands) // 2
    if n_inputs >= 2:
        gt = any(i.opcode == "compare" and i.attribute("direction") in ("GT", "GE")
                 for i in reducer.instructions)
        return "argmax" if gt else "argmin"
    if "maximum" in ops:
        return "max"
    if "minimum" in ops:
        return "min"
    return ""


def reduce_inputs(inst: HloInstruction) -> tuple[str, ...]:
    """The data operands of a reduce (the first half; the rest are init values)."""
    if inst.opcode == "reduce":
        return inst.operands[: max(1, len(inst.operands) // 2)]
    return inst.operands[:1]


def selection_reduces(ctx: Context, module: HloModule) -> Iterator[tuple[HloInstruction, HloInstruction, str]]:
    """(entry op, reduce, kind) for every order-invariant reduce of the module."""
    for inst in module.instructions():
        kind = selection_reduce_kind(module, inst)
        if kind:
            yield ctx.entry_op(module, inst), inst, kind


def value_uses(ctx: Context, module: HloModule, value: HloInstruction) -> list[ValueUse]:
    """Where ``value`` ends up, following data movement, fusion boundaries and the ROOT.

    Tuples are followed as a whole (an over-approximation): more uses means fewer findings.
    """
    callers = ctx.callers(module)
    out: list[ValueUse] = []
    stack = [value]
    seen: set[tuple[str, str]] = set()
    while stack:
        v = stack.pop()
        key = (v.computation, v.name)
        if key in seen:
            continue
        seen.add(key)
        comp = module.computation(v.computation)
        if comp is not None and comp.root.name == v.name:
            if v.computation == module.entry_name:
                out.append(ValueUse("output", v))
            else:
                caller = callers.get(v.computation)
                if caller is not None and caller.opcode == "fusion":
                    stack.append(caller)
                else:
                    out.append(ValueUse("other", caller or v))
        for u in module.users_of(v):
            if u.opcode in PASS_THROUGH_OPCODES:
                stack.append(u)
            elif u.opcode == "fusion":
                body = module.fusion_body(u)
                params = body.parameters if body is not None else []
                for idx, op in enumerate(u.operands):
                    if op == v.name and idx < len(params):
                        stack.append(params[idx])
            elif selection_reduce_kind(module, u) and v.name in reduce_inputs(u):
                out.append(ValueUse("reduce", u))
            else:
                out.append(ValueUse("other", u))
    return out


def only_reaches_selection(uses: Sequence[ValueUse]) -> bool:
    """True when the value reaches at least one order-invariant reduce and otherwise only outputs."""
    return any(u.kind == "reduce" for u in uses) and all(u.kind in ("reduce", "output") for u in uses)


def widening_convert_of(module: HloModule, inst: HloInstruction) -> tuple[str, str] | None:
    """(narrow dtype, wide dtype) when ``inst`` is an exact widening convert (bare or wrapped)."""
    if not (inst.opcode == "convert" or (inst.opcode == "fusion" and is_convert_only(module, inst))):
        return None
    ops = module.operands_of(inst)
    if len(ops) != 1:
        return None
    src, dst = ops[0].shape.dtype, inst.shape.dtype
    return (src, dst) if is_exact_widening(src, dst) else None


@dataclass(frozen=True, slots=True)
class ConvertProgram:
    """A module whose only real work is one widening convert (an eager ``astype``)."""

    module: HloModule
    op: HloInstruction
    """The entry-level op doing the convert (``convert_element_type.1``, ``wrapped_convert``)."""
    convert: HloInstruction
    """The convert instruction itself (inside the fusion on XLA:CPU), for its metadata."""
    narrow: str
    shape: HloShape
    """The widened result."""


def convert_programs(ctx: Context) -> list[ConvertProgram]:
    """Modules whose entry does nothing but one exact widening convert."""
    out: list[ConvertProgram] = []
    for m in ctx.modules:
        work = [i for i in m.entry.instructions if real_work(i)]
        if len(work) != 1:
            continue
        op = work[0]
        widen = widening_convert_of(m, op)
        if widen is None or op.shape.is_tuple:
            continue
        body = m.fusion_body(op)
        convert = next((i for i in body.instructions if i.opcode == "convert"), op) if body else op
        out.append(ConvertProgram(m, op, convert, widen[0], op.shape))
    return out


def producing_convert_program(ctx: Context, module: HloModule, param: HloInstruction) -> ConvertProgram | None:
    """The convert program that most likely produced entry parameter ``param`` of ``module``.

    XLA programs do not record which host-side array feeds which parameter, so this is a heuristic:
    a separate program whose only work is a widening convert and whose result has exactly the
    parameter's dtype and dimensions. With op stats both must also run about as often (within 2x),
    which is what a per-step eager ``astype`` feeding a per-step jitted call looks like.
    """
    if param.opcode != "parameter" or param.computation != module.entry_name:
        return None
    for prog in convert_programs(ctx):
        if prog.module is module:
            continue
        if prog.shape.dtype != param.shape.dtype or prog.shape.dims != param.shape.dims:
            continue
        if ctx.has_opstats:
            a = ctx.op_timing(prog.module, prog.op.name)
            mine = ctx.module_rows(module)
            if a is not None and mine is not None and len(mine):
                b = int(mine["occurrences"].max())
                if a.occurrences and b and not (0.5 <= a.occurrences / b <= 2.0):
                    continue
        return prog
    return None


def fusion_read_of(module: HloModule, op: HloInstruction, inner: HloInstruction) -> HloInstruction | None:
    """The entry-level operand of ``op`` that feeds ``inner``'s first data input, or None.

    ``op`` is an entry-level op: ``inner`` itself, or a fusion containing ``inner``. Walks back
    through data movement inside the fusion; returns None when the walk meets real work (including
    a convert: then the fusion reads the narrow value and widens in registers).
    """
    if op is inner:
        ops = module.operands_of(inner)
        return ops[0] if ops else None
    cur = module.instruction(reduce_inputs(inner)[0], inner.computation)
    while cur is not None:
        if cur.opcode == "parameter":
            comp = module.computation(cur.computation)
            caller = next((i for i in module.instructions()
                           if comp is not None and comp.name in i.called_computations[:1]
                           and i.opcode == "fusion"), None)
            if caller is None or cur.parameter_number is None:
                return None
            outer = module.instruction(caller.operands[cur.parameter_number], caller.computation)
            if caller is op or outer is None:
                return outer
            cur = outer
            continue
        if cur.opcode in PASS_THROUGH_OPCODES and cur.operands:
            cur = module.instruction(cur.operands[0], cur.computation)
            continue
        return None
    return None


def is_argmax_program(ctx: Context, module: HloModule) -> bool:
    """True when the module holds an argmax/argmin (a greedy sampler)."""
    return any(k in ("argmax", "argmin") for _, _, k in selection_reduces(ctx, module))


def dtype_shape(shape: HloShape) -> str:
    """``f32[512,256000]`` (no layout)."""
    return shape.text(with_layout=False)


def fmt_bytes(n: float) -> str:
    """Bytes for people: ``500 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# -------------------------------------------------------------------------------------------------
# Loading an input
# -------------------------------------------------------------------------------------------------

_PROGRAM_ID_IN_NAME = re.compile(r"\((\d+)\)")
_HLO_TEXT_SUFFIXES = (".hlo.txt", "after_optimizations.txt", ".hlo")


def load_context(path: Path, *, source_root: Path | None = None) -> Context:
    """Read an input into a :class:`Context`; :class:`InputError` (one line) when it is unusable.

    Accepted: a run directory written by ``profile`` or any folder holding an ``.xplane.pb``; a bare
    ``.xplane.pb``; a folder with ``opstats.json`` and ``*.hlo.txt`` modules (sample traces); an
    ``--xla_dump_to`` folder (``*after_optimizations.txt``; no times); one HLO text file.
    """
    path = Path(path)
    if source_root is not None and not Path(source_root).is_dir():
        raise InputError(f"--source {source_root} is not a folder", "pass the root of the source tree")
    if not path.exists():
        raise InputError(f"{path} does not exist",
                         "pass a run directory, an .xplane.pb, an XLA dump folder or an HLO text file")
    if path.is_file():
        if path.name.endswith(".xplane.pb"):
            return _from_opstats_loader(path, "xplane", source_root)
        if path.suffix == ".json":
            return _from_opstats_json(path.parent, source_root, path)
        return _from_hlo_files([path], path, "hlo", source_root)
    if (path / "opstats.json").is_file() and not _has_xplane(path):
        return _from_opstats_json(path, source_root)
    if _has_xplane(path):
        return _from_opstats_loader(path, "run", source_root)
    dumps = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith("after_optimizations.txt"))
    if dumps:
        return _from_hlo_files(dumps, path, "xla-dump", source_root)
    texts = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(_HLO_TEXT_SUFFIXES))
    if texts:
        return _from_hlo_files(texts, path, "hlo", source_root)
    raise InputError(f"{path}: no trace (.xplane.pb), opstats.json or optimized HLO text inside",
                     "pass a run directory from 'hlo-doctor profile', an .xplane.pb, or an --xla_dump_to folder")


def _has_xplane(path: Path) -> bool:
    return any(path.rglob("*.xplane.pb"))


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a text file", "pass optimized HLO text or an .xplane.pb") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", "check the path and permissions") from exc


def _read_hlo_file(path: Path) -> list[HloModule]:
    text = _read_text(path)
    if not text.strip():
        raise InputError(f"{path}: empty file", "pass optimized HLO text (compiled.as_text())")
    modules = parse_modules(text, origin=str(path))
    if not modules:
        raise InputError(f"{path}: no 'HloModule' header", "pass optimized HLO text (compiled.as_text())")
    m = _PROGRAM_ID_IN_NAME.search(path.name)
    if m and len(modules) == 1:
        modules = [_with_program_id(modules[0], int(m.group(1)))]
    return modules


def _with_program_id(module: HloModule, program_id: int | None) -> HloModule:
    return HloModule(name=module.name, computations=module.computations, entry_name=module.entry_name,
                     input_output_alias=module.input_output_alias, program_id=program_id, text=module.text)


def _from_hlo_files(files: list[Path], origin: Path, kind: str, source_root: Path | None) -> Context:
    modules: list[HloModule] = []
    for f in files:
        modules.extend(_read_hlo_file(f))
    return Context(modules=tuple(modules), origin=str(origin), kind=kind, source_root=source_root)


def _from_opstats_json(folder: Path, source_root: Path | None, export: Path | None = None) -> Context:
    """A folder with an ``opstats.json`` export and the run's modules as ``*.hlo.txt`` files.

    A module file may carry its program id in its name (``jit_sample(12).hlo.txt``); otherwise the
    id is taken from the table when the module name has exactly one.
    """
    from hlo_doctor.opstats import load_opstats

    stats = load_opstats(export or folder / "opstats.json")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(_HLO_TEXT_SUFFIXES))
    modules: list[HloModule] = []
    for f in files:
        modules.extend(_read_hlo_file(f))
    modules = [_program_id_from_table(m, stats.table) for m in modules]
    return _context_from_stats(stats, tuple(modules), folder, "opstats", source_root)


def executed_modules(modules: Sequence[HloModule], table: pd.DataFrame | None) -> tuple[HloModule, ...]:
    """The modules that ran in the traced window (have op-stats rows).

    A trace's metadata plane also keeps modules compiled before the window (set-up, warm-up,
    initialisation); rules look only at what ran. When no module matches the table at all (names
    spelled differently), all are kept.
    """
    if table is None or not len(table):
        return tuple(modules)
    pairs = {(str(m), None if _isna(p) else int(p)) for m, p in zip(table["module"], table["program_id"],
                                                                          strict=False)}
    names = {m for m, _ in pairs}
    kept = tuple(m for m in modules
                 if (m.name, m.program_id) in pairs or (m.name in names and
                                                        (m.program_id is None or (m.name, None) in pairs)))
    return kept if kept else tuple(modules)


def _isna(v: Any) -> bool:
    try:
        return bool(v is None or v != v or str(v) == "<NA>")
    except (TypeError, ValueError):
        return False


def _context_from_stats(stats: Any, modules: tuple[HloModule, ...], origin: Path, kind: str,
                        source_root: Path | None) -> Context:
    return Context(
        modules=executed_modules(modules, stats.table), table=stats.table, step_time_us=float(stats.step_time_us or 0) or None,
        num_steps=int(stats.num_steps or 0),
        compile_events=tuple(_compile_event(e) for e in stats.compile_events or ()),
        source_root=source_root, backend=str(stats.backend or ""), origin=str(origin), kind=kind,
    )


def _program_id_from_table(module: HloModule, table: pd.DataFrame) -> HloModule:
    if module.program_id is not None or not len(table):
        return module
    ids = table.loc[table["module"] == module.name, "program_id"].dropna().unique()
    return _with_program_id(module, int(ids[0])) if len(ids) == 1 else module


def _compile_event(e: Any) -> CompileEvent:
    if isinstance(e, CompileEvent):
        return e
    if isinstance(e, dict):
        return CompileEvent(str(e.get("name", "")), float(e.get("start_us", 0) or 0),
                            float(e.get("duration_us", 0) or 0), str(e.get("module", "") or ""),
                            str(e.get("detail", "") or ""))
    return CompileEvent(str(getattr(e, "name", "")), float(getattr(e, "start_us", 0) or 0),
                        float(getattr(e, "duration_us", 0) or 0), str(getattr(e, "module", "") or ""),
                        str(getattr(e, "detail", "") or ""))


def table_from_records(records: Sequence[Any], *, origin: str = "") -> pd.DataFrame:
    """The op-stats table from row dicts, with every column of the spec (missing ones filled).

    Columns: those of :data:`hlo_doctor.opstats.COLUMNS`, in that order.
    """
    import pandas as pd

    from hlo_doctor.opstats import COLUMNS

    if not all(isinstance(r, dict) for r in records):
        raise InputError(f"{origin or 'op stats'}: rows must be objects", "re-create it with 'hlo-doctor profile'")
    df = pd.DataFrame(list(records))
    for col in ("module", "op"):
        if len(df) and col not in df:
            raise InputError(f"{origin or 'op stats'}: rows lack the '{col}' column",
                             "re-create it with 'hlo-doctor profile'")
    defaults = {"int64": 0, "Int64": pd.NA, "float64": math.nan, "string": ""}
    for c in COLUMNS:
        if c.name not in df:
            df[c.name] = defaults.get(c.dtype, pd.NA)
    df = df[[c.name for c in COLUMNS] + [c for c in df.columns if c not in {x.name for x in COLUMNS}]]
    for c in COLUMNS:
        try:
            df[c.name] = df[c.name].astype(c.dtype)
        except (ValueError, TypeError) as exc:
            raise InputError(f"{origin or 'op stats'}: column '{c.name}' is not {c.dtype} ({exc})",
                             "re-create it with 'hlo-doctor profile'") from exc
    return df


def _from_opstats_loader(path: Path, kind: str, source_root: Path | None) -> Context:
    """Run directories and xplanes go through the op-stats stage (modules come from the trace)."""
    from hlo_doctor.opstats import load_opstats

    stats = load_opstats(path)
    return _context_from_stats(stats, tuple(stats.modules), path, kind, source_root)


def context_from_example(example: Example, *, source_root: Path | None = None) -> Context:
    """The :class:`Context` a rule example describes (used by the generated tests and ``rules explain``)."""
    modules: list[HloModule] = []
    for text in example.hlo:
        modules.extend(parse_modules(text, origin="example"))
    table = table_from_records([dict(r) for r in example.opstats], origin="example") if example.opstats else None
    if table is not None:
        modules = [_program_id_from_table(m, table) for m in modules]
    return Context(
        modules=tuple(modules), table=table, step_time_us=example.step_time_us, num_steps=example.num_steps,
        compile_events=tuple(_compile_event(dict(e)) for e in example.compile_events),
        source_root=source_root, origin="example", kind="example",
    )


# -------------------------------------------------------------------------------------------------
# Running the rules
# -------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The result of a diagnosis: findings (most recoverable first) and the summary figures."""

    findings: tuple[Finding, ...]
    step_time_us: float | None
    recoverable_us: float | None
    """Sum over distinct ops of the largest recoverable estimate (None without op stats)."""
    num_steps: int
    origin: str
    kind: str
    backend: str
    rules_run: tuple[str, ...]
    rules_skipped: tuple[tuple[str, str], ...] = ()
    """(code, reason) for rules whose inputs were missing."""
    modules: tuple[str, ...] = ()
    elapsed_s: float = 0.0

    @property
    def recoverable_pct(self) -> float | None:
        if self.recoverable_us is None or not self.step_time_us:
            return None
        return 100.0 * self.recoverable_us / self.step_time_us

    def at_or_above(self, severity: Severity) -> list[Finding]:
        return [f for f in self.findings if f.severity >= severity]

    def summary_line(self) -> str:
        """``~3.1 ms of ~26.5 ms per step (~12%) is recoverable``, or a count without op stats."""
        n = len(self.findings)
        if n == 0:
            return "no findings"
        head = f"{n} finding{'s' if n != 1 else ''}"
        if self.recoverable_us is None or not self.step_time_us:
            return f"{head} (no op stats: no time estimate)"
        pct = self.recoverable_pct or 0.0
        return (f"{head}: ~{_ms(self.recoverable_us)} of ~{_ms(self.step_time_us)} per step "
                f"(~{pct:.0f}%) is recoverable")

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.origin, "input_kind": self.kind, "backend": self.backend,
            "step_time_us": self.step_time_us, "num_steps": self.num_steps,
            "recoverable_us": self.recoverable_us, "recoverable_pct": self.recoverable_pct,
            "summary": self.summary_line(), "rules_run": list(self.rules_run),
            "rules_skipped": [{"code": c, "reason": r} for c, r in self.rules_skipped],
            "modules": list(self.modules),
            "findings": [f.to_dict() for f in self.findings],
        }


def _ms(us: float) -> str:
    return f"{us / 1000:.1f} ms" if us >= 100 else f"{us:.0f} us"


def run_rule(rule: LoadedRule | type[Any], ctx: Context) -> list[Finding]:
    """Run one rule; a crash becomes one internal-error finding (Severity.ERROR), never an exception."""
    cls = rule.rule if isinstance(rule, LoadedRule) else rule
    try:
        return list(cls().check(ctx))
    except Exception as exc:  # noqa: BLE001 - a rule's bug must not abort the diagnosis
        tb = traceback.format_exc().strip().splitlines()
        return [Finding(
            code=cls.code, name=cls.name, severity=Severity.ERROR,
            message=f"rule {cls.code} crashed: {type(exc).__name__}: {exc}",
            source=str(getattr(rule, "path", "")), evidence=tuple(tb[-4:]),
            extra=(("internal_error", True),),
        )]


def diagnose(ctx: Context, rulebook: RuleBook, *, select: Iterable[str] = (),
             ignore: Iterable[str] = ()) -> Diagnosis:
    """Run the selected rules over ``ctx`` and summarize."""
    t0 = time.perf_counter()
    rules = rulebook.select(select, ignore)
    findings: list[Finding] = [e.to_finding() for e in rulebook.errors]
    run: list[str] = []
    skipped: list[tuple[str, str]] = []
    for r in rules:
        missing = [req for req in r.rule.requires if not ctx.provides(req)]
        if missing:
            skipped.append((r.code, "needs " + ", ".join(_REQUIREMENT_WORDS.get(m, m) for m in missing)))
            continue
        run.append(r.code)
        findings.extend(run_rule(r, ctx))
    findings.sort(key=lambda f: (-(f.recoverable_us or 0.0), -int(f.severity), f.code, f.module, f.op))
    return Diagnosis(
        findings=tuple(findings), step_time_us=ctx.step_time_us,
        recoverable_us=total_recoverable(findings) if ctx.has_opstats else None,
        num_steps=ctx.num_steps, origin=ctx.origin, kind=ctx.kind, backend=ctx.backend,
        rules_run=tuple(run), rules_skipped=tuple(skipped),
        modules=tuple(m.name if m.program_id is None else f"{m.name}({m.program_id})" for m in ctx.modules),
        elapsed_s=time.perf_counter() - t0,
    )


_REQUIREMENT_WORDS = {"opstats": "op stats (a trace)", "hlo": "HLO modules", "source": "--source"}


def total_recoverable(findings: Iterable[Finding]) -> float:
    """Sum of recoverable time, counting each (module, program id, op) once with its largest estimate."""
    best: dict[tuple[str, int | None, str], float] = {}
    for f in findings:
        if f.recoverable_us is None:
            continue
        key = (f.module, f.program_id, f.op) if f.op else (f.code, None, f.message)
        best[key] = max(best.get(key, 0.0), f.recoverable_us)
    return sum(best.values())


__all__ = [
    "CompileEvent", "Context", "ConvertProgram", "Diagnosis", "OpTiming", "ValueUse", "context_from_example",
    "convert_programs", "diagnose", "dtype_shape", "fmt_bytes", "fused_opcodes", "fusion_read_of",
    "is_argmax_program", "is_exact_widening", "load_context", "only_reaches_selection",
    "producing_convert_program", "run_rule", "selection_reduce_kind", "selection_reduces",
    "table_from_records", "total_recoverable", "value_uses", "widening_convert_of",
]
