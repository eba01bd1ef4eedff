"""The op-stats table: ONE pandas table keyed by (module, program id, op), with one column spec.

Every stage that reads or writes op stats uses :data:`COLUMNS`; units are in the names.

How the table is built (docs/profile.md says the same for people):

- Op events come from :mod:`hlo_doctor.trace` (XLA:CPU host events or TPU/GPU device events).
- Steps come from the step annotations (``StepTraceAnnotation``) when the trace has them
  (``step_source = "annotation"``); otherwise from the executions of the step's main module, the
  module with the most op time (``step_source = "module-executions"``): step *k* runs from the start
  of the *k*-th execution to the start of the next one (the last one to the end of the last op event).
- ``time_per_step_us`` = total op time / number of steps / number of devices the op ran on.
- ``pct_of_step`` = ``time_per_step_us`` / mean step wall time x 100. XLA:CPU runs independent ops of
  one program concurrently, so op times are not a partition of the step: the column can sum to more
  than 100 over the table. It says how long the op itself ran relative to the step, not its share.
- Shapes, operands, bytes and the source line come from the HLO modules stored in the trace.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import RunInfo

# The shape/bracket helpers are the parser's own; op texts in device traces use the same syntax.
from hlo_doctor.hlo import (
    HloInstruction,
    HloModule,
    HloShape,
    _find_closing,
    _parse_shape_prefix,
    _split_top_level,
    fused_opcodes,
    is_convert_only,
    module_text_from_proto,
    parse_module,
)
from hlo_doctor.trace import CompileEvent, Trace, find_xplanes, read_trace, xprof_hlo_stats

__all__ = [
    "COLUMNS", "COLUMN_NAMES", "PER_STEP_COLUMNS", "Column", "CompileEvent", "OpStats", "build_opstats",
    "categorize", "empty_table", "from_json", "group_by_shape", "load_opstats", "modules_from_trace",
    "parse_op_text",
    "to_json", "write_exports",
]

JSON_FORMAT = "hlo-doctor.opstats/1"


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the op-stats table."""

    name: str
    dtype: str
    """pandas dtype."""
    unit: str
    meaning: str


COLUMNS: tuple[Column, ...] = (
    Column("rank", "int64", "", "1 = most time per step"),
    Column("program_id", "Int64", "", "XLA program id of the module (changes across recompiles)"),
    Column("module", "string", "", "HLO module name as the trace names it (jit_sample)"),
    Column("op", "string", "", "HLO instruction name (copy.2, iota_reduce_fusion)"),
    Column("opcode", "string", "", "HLO opcode (copy, fusion, convert...)"),
    Column("category", "string", "",
           "what the op does: convert, copy, reduce, matmul, elementwise, data-movement, collective, "
           "custom-call, other"),
    Column("shape", "string", "", "result shape as HLO writes it: f32[512,256000]{1,0}"),
    Column("operand_shapes", "string", "", "operand shapes, '; '-separated"),
    Column("occurrences", "int64", "count", "op events in the trace"),
    Column("total_time_us", "float64", "us", "sum of the op's event durations (all devices)"),
    Column("avg_time_us", "float64", "us", "total_time_us / occurrences"),
    Column("time_per_step_us", "float64", "us", "total_time_us / number of steps / devices"),
    Column("pct_of_step", "float64", "%", "time_per_step_us over the mean step wall time, x100"),
    Column("bytes_read", "int64", "bytes", "sum of operand sizes (from the shapes)"),
    Column("bytes_written", "int64", "bytes", "result size (from the shape)"),
    Column("bytes_accessed", "int64", "bytes", "bytes_read + bytes_written"),
    Column("op_name", "string", "", "HLO metadata op_name (jit(sample)/reduce)"),
    Column("source", "string", "", "file:line from the HLO metadata"),
    Column("canonical_key", "string", "",
           "key stable across recompiles: module name without program id | opcode | shape "
           "[#disambiguator]"),
    Column("self_time_us", "float64", "us",
           "total_time_us minus op events nested inside this op's events on the same thread/stream"),
    Column("devices", "int64", "count", "devices (device planes, or hosts on XLA:CPU) the op ran on"),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

PER_STEP_COLUMNS: tuple[str, ...] = ("step", "module", "program_id", "op", "canonical_key", "time_us")
"""Columns of :attr:`OpStats.per_step`: one row per (step, op); ``time_us`` is the op's time in that
step (per device), 0 when it did not run in that step."""

_COLLECTIVES = frozenset({
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
    "all-reduce-start", "all-reduce-done", "all-gather-start", "all-gather-done",
    "collective-permute-start", "collective-permute-done", "send", "recv", "send-done", "recv-done",
    "collective-broadcast", "ragged-all-to-all",
})
_DATA_MOVEMENT = frozenset({
    "transpose", "broadcast", "slice", "concatenate", "dynamic-update-slice", "dynamic-slice",
    "gather", "scatter", "pad", "reshape", "reverse", "iota", "copy-start", "copy-done",
})
_REDUCTIONS = frozenset({"reduce", "reduce-window", "reduce-precision", "select-and-scatter", "sort"})
_MATMUL = frozenset({"dot", "convolution", "ragged-dot"})
_ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "atan2",
    "abs", "negate", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt",
    "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "floor", "ceil", "round-nearest-afz",
    "round-nearest-even", "sign", "not", "and", "or", "xor", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "compare", "select", "clamp", "is-finite", "erf", "real", "imag",
    "complex", "popcnt", "count-leading-zeros", "bitcast-convert", "stochastic-convert", "map",
    "convert",
})


@dataclass(frozen=True, slots=True)
class OpStats:
    """The op-stats table of one capture and what it was built from."""

    table: pd.DataFrame
    """Columns: :data:`COLUMN_NAMES`; one row per (module, program_id, op), sorted by rank."""
    step_time_us: float
    """Mean step wall time."""
    step_times_us: tuple[float, ...]
    """Wall time of each step (all hosts)."""
    num_steps: int
    step_source: str
    """``annotation`` (step marks in the trace) or ``module-executions``."""
    per_step: pd.DataFrame
    """Columns: :data:`PER_STEP_COLUMNS` (per-step op time samples, for gate statistics)."""
    modules: tuple[HloModule, ...]
    """HLO modules from the trace's metadata plane (``program_id`` set); empty from a JSON export."""
    compile_events: tuple[CompileEvent, ...]
    backend: str
    run: RunInfo | None
    source_path: str
    device_kind: str = ""
    warnings: tuple[str, ...] = ()
    """Things the reader worked around (a module it could not parse...), one line each."""
    versions: tuple[tuple[str, str], ...] = field(default=())

    def module(self, name: str, program_id: int | None = None) -> HloModule | None:
        """The module with this name (and program id, when given)."""
        for m in self.modules:
            if m.name == name and (program_id is None or m.program_id == program_id):
                return m
        return None


def empty_table() -> pd.DataFrame:
    """An op-stats table with no rows and the right dtypes. Columns: :data:`COLUMN_NAMES`."""
    return pd.DataFrame({c.name: pd.Series([], dtype=c.dtype) for c in COLUMNS})


# ---------------------------------------------------------------------------------------------
# Categories and keys
# ---------------------------------------------------------------------------------------------

def categorize(module: HloModule | None, inst: HloInstruction | None, op_name: str = "") -> str:
    """The category of an op, from its opcode and (for a fusion) the opcodes in its body.

    Without HLO (a trace without modules) the op name is used (``wrapped_convert``, ``copy.2``).
    """
    if inst is None or module is None:
        return _categorize_name(op_name)
    opcode = inst.opcode
    if opcode == "fusion":
        ops = [o for o in fused_opcodes(module, inst)]
        if is_convert_only(module, inst):
            return "convert"
        return _categorize_set(set(ops)) if ops else "other"
    if opcode == "convert":
        return "convert"
    return _categorize_set({opcode})


def _categorize_set(ops: set[str]) -> str:
    if ops & _COLLECTIVES:
        return "collective"
    if ops & _MATMUL:
        return "matmul"
    if ops & _REDUCTIONS:
        return "reduce"
    if "custom-call" in ops:
        return "custom-call"
    if ops <= {"copy"}:
        return "copy"
    if ops <= {"convert"}:
        return "convert"
    if ops <= (_DATA_MOVEMENT | {"copy"}):
        return "data-movement"
    if ops & (_ELEMENTWISE - {"convert"}):
        return "elementwise"
    if ops <= (_DATA_MOVEMENT | {"copy", "convert"}):
        return "data-movement"
    return "other"


def _categorize_name(name: str) -> str:
    base = re.sub(r"\.\d+$", "", name).lower()
    for words, category in (
        (("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective", "send", "recv"),
         "collective"),
        (("dot", "matmul", "convolution", "conv", "gemm", "cublas"), "matmul"),
        (("argmax", "argmin", "reduce"), "reduce"),
        (("custom-call", "custom_call"), "custom-call"),
        (("convert",), "convert"),
        (("copy",), "copy"),
        (("transpose", "broadcast", "slice", "concatenate", "gather", "scatter", "pad"), "data-movement"),
        (("add", "multiply", "subtract", "divide", "exponential", "select", "compare", "maximum", "loop"),
         "elementwise"),
    ):
        # Multi-word names match as substrings, single words as whole tokens ("conv" is not
        # "convert").
        tokens = set(re.split(r"[_.\-]", base))
        if any((w in base) if "-" in w else (w in tokens) for w in words):
            return category
    return "other"


def _body_digest(module: HloModule | None, inst: HloInstruction | None, operand_shapes: str) -> str:
    """A short hash of what an op does: its fused opcodes and operand shapes (stable across recompiles)."""
    parts: list[str] = [operand_shapes]
    if module is not None and inst is not None:
        parts.extend(fused_opcodes(module, inst))
        parts.append(inst.fusion_kind)
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:6]


_NUM = re.compile(r"(\d+)")


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in _NUM.split(text))


def assign_canonical_keys(rows: list[dict[str, Any]], digests: Sequence[str]) -> None:
    """Set ``canonical_key`` on each row: ``module|opcode|shape``, made unique within the table.

    Rows sharing a base key get ``#<digest>`` (a hash of the fused opcodes and operand shapes); rows
    that still collide get ``#<digest>.<n>`` in the order of (op name, program id), deterministic for
    one capture.
    """
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        base = f"{row['module']}|{row['opcode'] or row['op']}|{_strip_layout(row['shape'])}"
        row["canonical_key"] = base
        groups.setdefault(base, []).append(i)
    for base, idx in groups.items():
        if len(idx) == 1:
            continue
        by_digest: dict[str, list[int]] = {}
        for i in idx:
            by_digest.setdefault(digests[i], []).append(i)
        for digest, members in by_digest.items():
            if len(members) == 1:
                rows[members[0]]["canonical_key"] = f"{base}#{digest}"
                continue
            members.sort(key=lambda i: (_natural(rows[i]["op"]), rows[i]["program_id"] or -1))
            for n, i in enumerate(members):
                rows[i]["canonical_key"] = f"{base}#{digest}.{n}"


def _strip_layout(shape: str) -> str:
    # Layouts differ between backends and tiling choices; the key keeps dtype and dims only.
    return re.sub(r"\{[^{}]*\}", "", shape)


# ---------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------

def modules_from_trace(trace: Trace) -> tuple[tuple[HloModule, ...], tuple[str, ...]]:
    """Parse the HLO modules stored in the trace (one per (name, program id)); and warnings."""
    seen: set[tuple[str, int | None]] = set()
    modules: list[HloModule] = []
    warnings: list[str] = []
    for proto in trace.module_protos:
        key = (proto.name, proto.program_id)
        if key in seen:
            continue
        seen.add(key)
        origin = f"{proto.name}({proto.program_id})"
        try:
            text = module_text_from_proto(proto.hlo_proto, origin=origin)
            modules.append(parse_module(text, program_id=proto.program_id, origin=origin))
        except InputError as exc:
            warnings.append(f"module {origin} skipped: {exc.what}")
    return tuple(modules), tuple(warnings)


# ---------------------------------------------------------------------------------------------
# Building the table
# ---------------------------------------------------------------------------------------------

def _events_frame(trace: Trace) -> pd.DataFrame:
    ops = trace.ops
    return pd.DataFrame({
        "host": pd.Categorical(ops.host),
        "device": pd.Categorical(ops.device),
        "module": pd.Categorical(ops.module),
        "program_id": np.asarray(ops.program_id, dtype=np.int64),
        "op": pd.Categorical(ops.op),
        "start_ns": np.asarray(ops.start_ns, dtype=np.float64),
        "duration_ns": np.asarray(ops.duration_ns, dtype=np.float64),
        "self_ns": np.asarray(ops.self_ns, dtype=np.float64),
        "run_id": np.asarray(ops.run_id, dtype=np.int64),
    })


def _steps_from_annotations(trace: Trace, ev: pd.DataFrame) -> tuple[np.ndarray, list[float], int]:
    """Step index (step_num) per event, or -1 outside every step; step wall times; step count."""
    step_of = np.full(len(ev), -1, dtype=np.int64)
    times: list[float] = []
    counts: dict[str, int] = {}
    # Only the most common annotation name counts as "the step" (a program may nest other marks).
    names: dict[str, int] = {}
    for s in trace.steps:
        names[s.name] = names.get(s.name, 0) + 1
    step_name = max(names, key=lambda n: names[n])
    hosts = ev["host"].astype(str).to_numpy()
    starts = ev["start_ns"].to_numpy()
    for host in sorted({s.host for s in trace.steps}):
        marks = sorted((s for s in trace.steps if s.host == host and s.name == step_name),
                       key=lambda s: s.start_ns)
        counts[host] = len(marks)
        on_host = hosts == host
        for position, mark in enumerate(marks):
            times.append(mark.duration_ns / 1e3)
            label = mark.step_num if mark.step_num >= 0 else position
            inside = on_host & (starts >= mark.start_ns) & (starts <= mark.start_ns + mark.duration_ns)
            step_of[inside] = label
    return step_of, times, max(counts.values()) if counts else 0


def _steps_from_executions(ev: pd.DataFrame) -> tuple[np.ndarray, list[float], int, str]:
    """Steps from the executions of the main module (the one with the most op time)."""
    totals = ev.groupby(["module", "program_id"], observed=True)["duration_ns"].sum()
    main_module, main_pid = totals.idxmax()
    step_of = np.full(len(ev), -1, dtype=np.int64)
    times: list[float] = []
    counts: list[int] = []
    hosts = ev["host"].astype(str).to_numpy()
    starts = ev["start_ns"].to_numpy()
    ends = starts + ev["duration_ns"].to_numpy()
    for host in sorted(set(hosts)):
        on_host = hosts == host
        main = ev[on_host & (ev["module"].astype(str).to_numpy() == str(main_module))
                  & (ev["program_id"].to_numpy() == main_pid)]
        if main["run_id"].ge(0).all():
            exec_starts = np.sort(main.groupby("run_id")["start_ns"].min().to_numpy())
        else:
            # No execution ids: each event of the main module's most frequent op marks one run
            # (ties: the op that starts first, i.e. the head of the program).
            per_op = main.groupby(main["op"].astype(str))["start_ns"].agg(["size", "min"])
            first_op = per_op.sort_values(["size", "min"], ascending=[False, True]).index[0]
            exec_starts = np.sort(main[main["op"].astype(str) == first_op]["start_ns"].to_numpy())
        if len(exec_starts) == 0:
            continue
        last_end = float(ends[on_host].max())
        bounds = np.append(exec_starts, max(last_end, float(exec_starts[-1])))
        counts.append(len(exec_starts))
        times.extend(float(d) / 1e3 for d in np.diff(bounds))
        idx = np.searchsorted(exec_starts, starts, side="right") - 1
        step_of[on_host & (idx >= 0)] = idx[on_host & (idx >= 0)]
    return step_of, times, max(counts) if counts else 0, f"{main_module}({main_pid})"


def build_opstats(
    trace: Trace,
    modules: Iterable[HloModule] | None = None,
    *,
    run: RunInfo | None = None,
    source_path: str = "",
    warnings: Sequence[str] = (),
    op_texts: Iterable[tuple[str, int, str, str]] = (),
) -> OpStats:
    """Build the op-stats table from a trace's op events and the HLO modules of that run.

    ``modules`` default to the ones stored in the trace. ``op_texts`` adds (module, program id, op,
    HLO text) entries (module may be empty) to the ones the trace carries: the shape of an op whose
    module is not in the trace comes from its text. Returns an :class:`OpStats` whose
    ``table`` has the columns :data:`COLUMN_NAMES` and ``per_step`` the columns
    :data:`PER_STEP_COLUMNS`.
    """
    notes = list(warnings)
    if modules is None:
        parsed, more = modules_from_trace(trace)
        notes.extend(more)
    else:
        parsed = tuple(modules)
    by_key: dict[tuple[str, int | None], HloModule] = {(m.name, m.program_id): m for m in parsed}
    by_name: dict[str, HloModule] = {}
    for m in parsed:
        by_name.setdefault(m.name, m)

    op_text: dict[tuple[str, int, str], str] = {}
    for module_name, pid, op, text in (*trace.op_expressions, *op_texts):
        op_text.setdefault((module_name, pid, op), text)

    ev = _events_frame(trace)
    if trace.steps:
        step_of, step_times, num_steps = _steps_from_annotations(trace, ev)
        step_source = "annotation"
    else:
        step_of, step_times, num_steps, main = _steps_from_executions(ev)
        step_source = "module-executions"
        notes.append(f"no step annotations: steps are the {num_steps} executions of {main}")
    if num_steps == 0 or not step_times:
        num_steps, step_times = 1, [float((ev["start_ns"] + ev["duration_ns"]).max()
                                          - ev["start_ns"].min()) / 1e3]
        notes.append("no steps found: the whole trace counts as one step")
    step_time_us = float(np.mean(step_times)) if step_times else 0.0
    ev["step"] = step_of
    ev["device_key"] = ev["host"].astype(str) + "/" + ev["device"].astype(str)

    keys = ["module", "program_id", "op"]
    grouped = ev.groupby(keys, observed=True, sort=False)
    agg = grouped.agg(
        occurrences=("duration_ns", "size"), total_ns=("duration_ns", "sum"),
        self_ns=("self_ns", "sum"), devices=("device_key", "nunique"),
    ).reset_index()

    rows: list[dict[str, Any]] = []
    digests: list[str] = []
    for rec in agg.itertuples(index=False):
        module_name = str(rec.module)
        pid = int(rec.program_id)
        op = str(rec.op)
        module = by_key.get((module_name, pid if pid >= 0 else None)) or (
            by_name.get(module_name) if pid < 0 else None)
        inst = module.instruction(op) if module is not None else None
        total_us = float(rec.total_ns) / 1e3
        devices = max(int(rec.devices), 1)
        per_step_us = total_us / num_steps / devices
        if inst is not None:
            opcode = inst.opcode
            result_shape: HloShape | None = inst.shape
            operand_list = [o.shape for o in module.operands_of(inst)] if module is not None else []
            category = categorize(module, inst, op)
        else:
            # No module for this op: its HLO text from the device trace (or xprof) still has shapes.
            text = op_text.get((module_name, pid, op)) or op_text.get(("", pid, op)) or ""
            opcode, result_shape, operand_list = parse_op_text(text)
            category = _categorize_set({opcode}) if opcode and opcode != "fusion" else categorize(None, None, op)
        shape = result_shape.text() if result_shape is not None else ""
        operand_text = "; ".join(o.text() for o in operand_list)
        bytes_written = result_shape.nbytes if result_shape is not None else 0
        bytes_read = sum(o.nbytes for o in operand_list)
        rows.append({
            "program_id": pid if pid >= 0 else None,
            "module": module_name,
            "op": op,
            "opcode": opcode,
            "category": category,
            "shape": shape,
            "operand_shapes": operand_text,
            "occurrences": int(rec.occurrences),
            "total_time_us": total_us,
            "avg_time_us": total_us / int(rec.occurrences),
            "time_per_step_us": per_step_us,
            "pct_of_step": (per_step_us / step_time_us * 100.0) if step_time_us > 0 else 0.0,
            "bytes_read": int(bytes_read),
            "bytes_written": int(bytes_written),
            "bytes_accessed": int(bytes_read + bytes_written),
            "op_name": inst.op_name if inst is not None else "",
            "source": inst.source if inst is not None else "",
            "self_time_us": float(rec.self_ns) / 1e3,
            "devices": devices,
        })
        digests.append(_body_digest(module, inst, operand_text))
    missing = sorted({(r["module"], r["program_id"]) for r in rows
                      if not r["shape"] and (r["module"], r["program_id"]) not in by_key},
                     key=lambda mp: (mp[0], mp[1] if mp[1] is not None else -1))
    if missing and parsed:
        notes.append("no HLO module in the trace for " + ", ".join(f"{m}({p})" for m, p in missing[:5]))
    assign_canonical_keys(rows, digests)
    rows.sort(key=lambda r: (-r["time_per_step_us"], r["module"], _natural(r["op"]),
                             r["program_id"] if r["program_id"] is not None else -1))
    for rank, r in enumerate(rows, start=1):
        r["rank"] = rank
    table = _typed(pd.DataFrame(rows, columns=list(COLUMN_NAMES)) if rows else empty_table())

    per_step = _per_step(ev, rows)
    return OpStats(
        table=table, step_time_us=step_time_us, step_times_us=tuple(float(t) for t in step_times),
        num_steps=int(num_steps), step_source=step_source, per_step=per_step, modules=parsed,
        compile_events=trace.compile_events, backend=trace.backend, run=run, source_path=source_path,
        device_kind=trace.device_kind, warnings=tuple(notes), versions=trace.versions,
    )


def _per_step(ev: pd.DataFrame, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per-step op time (per device) for every op of the table and every step; 0 where it did not run."""
    dtypes = {"step": "int64", "module": "string", "program_id": "Int64", "op": "string",
              "canonical_key": "string", "time_us": "float64"}
    in_step = ev[ev["step"] >= 0]
    if in_step.empty or not rows:
        return pd.DataFrame({c: pd.Series([], dtype=dtypes[c]) for c in PER_STEP_COLUMNS})
    sums = (in_step.assign(module=in_step["module"].astype(str), op=in_step["op"].astype(str))
            .groupby(["step", "module", "program_id", "op"], observed=True)["duration_ns"].sum()
            .reset_index())
    ops = pd.DataFrame({
        "module": [r["module"] for r in rows],
        "program_id": [r["program_id"] if r["program_id"] is not None else -1 for r in rows],
        "op": [r["op"] for r in rows],
        "canonical_key": [r["canonical_key"] for r in rows],
        "devices": [r["devices"] for r in rows],
        "order": range(len(rows)),
    })
    steps = pd.DataFrame({"step": sorted(int(s) for s in in_step["step"].unique())})
    # Every (op, step) pair, so a step in which an op did not run counts as 0 for the statistics.
    grid = ops.merge(steps, how="cross").merge(sums, how="left", on=["step", "module", "program_id", "op"])
    grid = grid.sort_values(["order", "step"], kind="stable")
    grid["time_us"] = grid["duration_ns"].fillna(0.0) / 1e3 / grid["devices"]
    frame = grid[list(PER_STEP_COLUMNS)].reset_index(drop=True)
    raw = frame["program_id"].to_numpy(dtype=np.int64)
    pid = pd.array(raw, dtype="Int64")
    pid[raw < 0] = pd.NA
    frame["program_id"] = pid
    return frame.astype({c: t for c, t in dtypes.items() if c != "program_id"})


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    for c in COLUMNS:
        if c.dtype == "Int64":
            table[c.name] = pd.array([None if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)
                                      for v in table[c.name]], dtype="Int64")
        else:
            table[c.name] = table[c.name].astype(c.dtype)
    return table.reset_index(drop=True)


def group_by_shape(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of the table aggregated by (opcode, shape).

    Columns: rank, opcode, category, shape, ops (how many table rows), occurrences, total_time_us,
    time_per_step_us, pct_of_step, bytes_accessed, modules ('; '-separated).
    """
    if table.empty:
        return pd.DataFrame(columns=["rank", "opcode", "category", "shape", "ops", "occurrences",
                                     "total_time_us", "time_per_step_us", "pct_of_step",
                                     "bytes_accessed", "modules"])
    key = table["opcode"].where(table["opcode"] != "", table["op"])
    g = table.assign(_opcode=key).groupby(["_opcode", "shape"], sort=False, observed=True)
    out = g.agg(
        category=("category", "first"), ops=("op", "size"), occurrences=("occurrences", "sum"),
        total_time_us=("total_time_us", "sum"), time_per_step_us=("time_per_step_us", "sum"),
        pct_of_step=("pct_of_step", "sum"), bytes_accessed=("bytes_accessed", "sum"),
        modules=("module", lambda s: "; ".join(sorted(set(map(str, s))))),
    ).reset_index().rename(columns={"_opcode": "opcode"})
    out = out.sort_values(["time_per_step_us", "opcode", "shape"], ascending=[False, True, True])
    out.insert(0, "rank", range(1, len(out) + 1))
    return out.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Exports
# ---------------------------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return value


def run_info_to_dict(run: RunInfo) -> dict[str, Any]:
    """``RunInfo`` as the plain dict written to run.json / opstats.json."""
    d = asdict(run)
    d["versions"] = dict(run.versions)
    d["config"] = dict(run.config)
    return d


def run_info_from_dict(d: dict[str, Any]) -> RunInfo:
    """Read a ``RunInfo`` back from :func:`run_info_to_dict`'s dict (unknown keys ignored)."""
    return RunInfo(
        target=str(d.get("target", "")), backend=str(d.get("backend", "")),
        device_kind=str(d.get("device_kind", "")), steps=int(d.get("steps", 0) or 0),
        warmup=int(d.get("warmup", 0) or 0), created=str(d.get("created", "")),
        versions=tuple(sorted((str(k), str(v)) for k, v in dict(d.get("versions", {})).items())),
        config=tuple(sorted((str(k), v) for k, v in dict(d.get("config", {})).items())),
    )


def to_json(stats: OpStats) -> str:
    """The whole OpStats as JSON (everything but the parsed modules), for gate and for people."""
    rows = [{k: _plain(v) for k, v in rec.items()} for rec in stats.table.to_dict(orient="records")]
    per_step = stats.per_step
    doc = {
        "format": JSON_FORMAT,
        "source_path": stats.source_path,
        "backend": stats.backend,
        "device_kind": stats.device_kind,
        "step_source": stats.step_source,
        "num_steps": stats.num_steps,
        "step_time_us": stats.step_time_us,
        "step_times_us": list(stats.step_times_us),
        "pct_of_step_definition": "time_per_step_us / mean step wall time x 100; op times may overlap "
                                  "(XLA:CPU runs independent ops concurrently), so the column may sum "
                                  "to more than 100",
        "columns": [asdict(c) for c in COLUMNS],
        "rows": rows,
        "per_step": {
            "columns": list(PER_STEP_COLUMNS),
            "rows": [[_plain(v) for v in rec] for rec in per_step.itertuples(index=False)],
        },
        "compile_events": [asdict(c) for c in stats.compile_events],
        "modules": [{"name": m.name, "program_id": m.program_id} for m in stats.modules],
        "run": run_info_to_dict(stats.run) if stats.run is not None else None,
        "versions": dict(stats.versions),
        "warnings": list(stats.warnings),
    }
    return json.dumps(doc, indent=1) + "\n"


def from_json(text: str, *, origin: str = "opstats.json") -> OpStats:
    """Read an OpStats back from :func:`to_json`'s output (``modules`` is empty)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin}: not JSON ({exc.msg} at line {exc.lineno})",
                         "pass an opstats.json written by hlo-doctor") from exc
    if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
        raise InputError(f"{origin}: not an hlo-doctor opstats export (format != {JSON_FORMAT})",
                         "pass an opstats.json written by 'hlo-doctor profile' or 'stats'")
    try:
        return _from_doc(doc, origin)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # A hand-edited or foreign export (a null in an integer column, a missing field) is bad
        # input, not a bug: name the file and the field.
        raise InputError(f"{origin}: malformed opstats export ({type(exc).__name__}: {exc})",
                         "re-export it with 'hlo-doctor stats RUN --format json'") from exc


def _from_doc(doc: dict[str, Any], origin: str) -> OpStats:
    rows = doc.get("rows", [])
    table = _typed(pd.DataFrame(rows, columns=list(COLUMN_NAMES)).astype(object)) if rows else empty_table()
    ps = doc.get("per_step", {})
    per_step = pd.DataFrame(ps.get("rows", []), columns=list(PER_STEP_COLUMNS))
    per_step = per_step.astype({"step": "int64", "program_id": "Int64", "module": "string", "op": "string",
                                "canonical_key": "string", "time_us": "float64"})
    run = run_info_from_dict(doc["run"]) if doc.get("run") else None
    return OpStats(
        table=table, step_time_us=float(doc.get("step_time_us", 0.0)),
        step_times_us=tuple(float(t) for t in doc.get("step_times_us", [])),
        num_steps=int(doc.get("num_steps", 0)), step_source=str(doc.get("step_source", "")),
        per_step=per_step, modules=(),
        compile_events=tuple(CompileEvent(**c) for c in doc.get("compile_events", [])),
        backend=str(doc.get("backend", "")), run=run, source_path=str(doc.get("source_path", origin)),
        device_kind=str(doc.get("device_kind", "")), warnings=tuple(doc.get("warnings", [])),
        versions=tuple(sorted(dict(doc.get("versions", {})).items())),
    )


def to_csv(table: pd.DataFrame) -> str:
    """The table as CSV (columns :data:`COLUMN_NAMES`)."""
    return str(table.to_csv(index=False, float_format="%.3f"))


def write_exports(stats: OpStats, directory: Path) -> tuple[Path, Path]:
    """Write ``opstats.csv`` and ``opstats.json`` into ``directory``; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    csv_path = directory / "opstats.csv"
    json_path = directory / "opstats.json"
    for path, text in ((csv_path, to_csv(stats.table)), (json_path, to_json(stats))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return csv_path, json_path


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

def _run_json_for(xplanes: list[Path], given: Path) -> Path | None:
    """``run.json`` of the run directory holding these xplanes, if any."""
    candidates = [given / "run.json"] if given.is_dir() else []
    for p in xplanes[:1]:
        # <run dir>/plugins/profile/<run>/<host>.xplane.pb
        if len(p.parents) >= 4:
            candidates.append(p.parents[3] / "run.json")
    return next((c for c in candidates if c.is_file()), None)


def read_run_info(path: Path) -> RunInfo | None:
    """The ``RunInfo`` in a ``run.json``; None when it cannot be read (the trace still is)."""
    try:
        return run_info_from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def load_opstats(path: str | Path) -> OpStats:
    """The op-stats of a capture.

    ``path``: a run directory (from ``hlo-doctor profile``, or any xprof/TensorBoard log directory
    with ``plugins/profile/<run>/*.xplane.pb``, one file per host), a bare ``.xplane.pb``, or an
    ``opstats.json`` export (then ``modules`` is empty). Raises :class:`InputError` for bad input.
    """
    p = Path(path)
    if p.is_file() and p.suffix == ".json":
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{p}: cannot read ({exc})", "pass an opstats.json written by hlo-doctor") from exc
        return from_json(text, origin=str(p))
    if p.is_file() and not p.name.endswith(".pb"):
        raise InputError(f"{p}: not an .xplane.pb or opstats.json",
                         "pass a run directory, an .xplane.pb file or an opstats.json export")
    xplanes = find_xplanes(p)
    trace = read_trace(xplanes)
    run_json = _run_json_for(xplanes, p)
    run = read_run_info(run_json) if run_json is not None else None
    texts: list[tuple[str, int, str, str]] = []
    if trace.backend != "cpu" and not trace.module_protos:
        # A device trace without its HLO modules: xprof's hlo_stats has each op's HLO text (it is
        # empty for XLA:CPU traces, so it is not asked there).
        for row in xprof_hlo_stats(xplanes):
            try:
                pid = int(str(row.get("program_id", "")).strip())
            except ValueError:
                continue
            name, text = str(row.get("hlo_op_name", "")), str(row.get("hlo_op_expression", "") or "")
            if name and text:
                texts.append(("", pid, name, text))
    return build_opstats(trace, run=run, source_path=str(p), op_texts=texts)


def parse_op_text(text: str) -> tuple[str, HloShape | None, list[HloShape]]:
    """(opcode, result shape, operand shapes) from one op's HLO text; ``("", None, [])`` if unreadable.

    Device traces and xprof print ops as ``%fusion.1 = bf16[8,128]{1,0} fusion(bf16[8,128]{1,0} %p0)``:
    operand shapes are printed inline, so bytes can be estimated without the module.
    """
    if "=" not in text:
        return "", None, []
    rest = text.split("=", 1)[1]
    try:
        shape, rest = _parse_shape_prefix(rest)
    except ValueError:
        return "", None, []
    m = re.match(r"\s*([a-z][\w\-]*)\(", rest)
    if not m:
        return "", shape, []
    opcode = m.group(1)
    operands: list[HloShape] = []
    try:
        close = _find_closing(rest, m.end() - 1)
    except ValueError:
        return opcode, shape, []
    for token in _split_top_level(rest[m.end():close]):
        try:
            operand, _ = _parse_shape_prefix(token)
        except ValueError:
            continue  # an operand printed without its shape
        operands.append(operand)
    return opcode, shape, operands
