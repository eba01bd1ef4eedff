"""Building the op-stats table from a :class:`~hlo_doctor.trace.Trace` and its HLO modules.

- Op events come from :mod:`hlo_doctor.trace` (XLA:CPU host events or TPU/GPU device events).
- Steps come from :mod:`hlo_doctor.opstats.steps`; the table is built from the events' sums
  (:mod:`hlo_doctor.opstats.totals`), which the hosts of a capture can add up apart.
- ``occurrences`` counts runs (an aggregated device event stands for ``num_occurrences`` runs);
  ``runs_per_step`` = occurrences / number of steps / number of devices the op ran on.
- ``time_per_step_us`` = total op time / number of steps / number of devices the op ran on.
- ``pct_of_step`` = ``time_per_step_us`` / mean step wall time x 100 (op times may overlap).
- Shapes, operands, bytes and the source line come from the HLO modules stored in the trace, or from
  an op's HLO text when its module is not there. The source of a fusion is the line of the op that
  costs inside it (:func:`~hlo_doctor.hlo.navigation.key_instruction`), the first frame of its
  stack outside the frameworks (:mod:`hlo_doctor.hlo.frames`), the path as captured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import RunInfo
from hlo_doctor.hlo import HloInstruction, HloModule, HloShape, parse_module
from hlo_doctor.hlo.categories import categorize, categorize_opcodes
from hlo_doctor.hlo.navigation import key_instruction
from hlo_doctor.hlo.printer import print_modules
from hlo_doctor.opstats.breakdown_build import finish_breakdown
from hlo_doctor.opstats.host_time import FrameKinds
from hlo_doctor.opstats.keys import assign_canonical_keys, body_digest, natural
from hlo_doctor.opstats.optext import parse_op_text
from hlo_doctor.opstats.per_step import PerStepLater
from hlo_doctor.opstats.roofline import add_roofline
from hlo_doctor.opstats.schema import OpStats, TableLater
from hlo_doctor.opstats.step_times import StepTimes
from hlo_doctor.opstats.totals import EventTotals, event_totals
from hlo_doctor.trace import ModuleProto, Trace
from hlo_doctor.trace.peaks import device_peaks


def modules_from_trace(trace: Trace) -> tuple[tuple[HloModule, ...], tuple[str, ...]]:
    """Parse the HLO modules stored in the trace (one per (name, program id)); and warnings."""
    return modules_from_protos(trace.module_protos)


def modules_from_protos(protos: Iterable[ModuleProto]) -> tuple[tuple[HloModule, ...], tuple[str, ...]]:
    """Parse HLO modules of a trace's metadata planes (the first of each (name, program id)); and warnings."""
    seen: set[tuple[str, int | None]] = set()
    firsts: list[ModuleProto] = []
    for proto in protos:
        key = (proto.name, proto.program_id)
        if key not in seen:
            seen.add(key)
            firsts.append(proto)
    # XLA's printer runs in a process of its own (a crash there is PrinterCrash, naming the host).
    texts = print_modules([(p.hlo_proto, f"{p.name}({p.program_id})", p.host, p.path) for p in firsts])
    modules: list[HloModule] = []
    warnings: list[str] = []
    for proto, text in zip(firsts, texts, strict=True):
        origin = f"{proto.name}({proto.program_id})"
        try:
            if isinstance(text, InputError):
                raise text
            modules.append(_parse(text, proto.program_id, origin))
        except InputError as exc:
            warnings.append(f"module {origin} skipped: {exc.what}")
    return tuple(modules), tuple(warnings)


_SHARED_PARSES: ContextVar[dict[str, HloModule] | None] = ContextVar("_SHARED_PARSES", default=None)


@contextmanager
def shared_module_parses() -> Iterator[None]:
    """Inside the block, a module text is parsed once for every capture read: two captures of one
    program (a gate's baseline and candidate) print the same modules, and parsing them is most of
    reading a small capture. The parsed modules are held until the block ends, no longer."""
    token = _SHARED_PARSES.set({})
    try:
        yield
    finally:
        _SHARED_PARSES.reset(token)


def _parse(text: str, program_id: int | None, origin: str) -> HloModule:
    """The module of ``text`` (with ``program_id``), parsed once per text inside :func:`shared_module_parses`."""
    parsed = _SHARED_PARSES.get()
    if parsed is None:
        return parse_module(text, program_id=program_id, origin=origin)
    module = parsed.get(text)
    if module is None:
        module = parsed[text] = parse_module(text, program_id=program_id, origin=origin)
    # The same text under another program id (a jit compiled again): the id is the module's only
    # field that is not read from the text.
    return module if module.program_id == program_id else dataclasses.replace(module, program_id=program_id)


@dataclass(frozen=True, slots=True)
class _Steps:
    times_us: Sequence[float]
    """A :class:`~hlo_doctor.opstats.step_times.StepTimes` (a pod's are millions: one array, never copied)."""
    count: int
    source: str


@dataclass(frozen=True, slots=True)
class _Hlo:
    """What the rows are looked up in: parsed modules, op texts and (a trace JSON's) op lines."""

    by_key: dict[tuple[str, int | None], HloModule]
    by_name: dict[str, HloModule]
    op_text: dict[tuple[str, int, str], str]
    op_source: dict[tuple[str, int, str], str]

    def module_of(self, name: str, program_id: int | None) -> HloModule | None:
        """The module of an op of this module name and program id (None: the id is unknown), as
        :func:`_row` finds it."""
        found = self.by_key.get((name, program_id))
        return found if found is not None or program_id is not None else self.by_name.get(name)


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
    totals = event_totals(trace, lambda: FrameKinds.from_modules(parsed, trace.stack_files))
    return opstats_from_totals(trace, totals, parsed, run=run, source_path=source_path, warnings=notes,
                               op_texts=op_texts)


def opstats_from_totals(
    trace: Trace,
    totals: EventTotals,
    modules: Sequence[HloModule],
    *,
    run: RunInfo | None = None,
    source_path: str = "",
    warnings: Sequence[str] = (),
    op_texts: Iterable[tuple[str, int, str, str]] = (),
    device_rank: Mapping[tuple[str, str], int] | None = None,
) -> OpStats:
    """The op-stats table from the sums of a trace's op events (:mod:`~hlo_doctor.opstats.totals`).

    ``trace`` gives everything but its events (which may be empty: the totals hold what they add up
    to); ``modules`` are its parsed HLO modules; ``device_rank`` orders the breakdown's devices where
    the totals of several hosts were added up. Columns as :func:`build_opstats`.
    """
    parsed = tuple(modules)
    notes = list(warnings)
    notes.extend(trace.warnings)
    hlo = _lookup(trace, parsed, op_texts)
    steps = _steps(totals, notes)
    step_time_us = float(np.mean(steps.times_us)) if steps.times_us else 0.0

    rows: list[dict[str, Any]] = []
    digests: list[str] = []
    for group, (module, pid, op) in enumerate(totals.keys):
        rec = _Totals(module, pid, op, int(totals.occurrences[group]), float(totals.total_ns[group]),
                      float(totals.self_ns[group]), int(totals.devices[group]), group)
        row, digest = _row(rec, hlo, steps.count, step_time_us)
        rows.append(row)
        digests.append(digest)
    missing = _missing_modules(rows, hlo)
    if missing and parsed:
        notes.append("no HLO module in the trace for " + ", ".join(f"{m}({p})" for m, p in missing[:5]))
    assign_canonical_keys(rows, digests)
    peaks = device_peaks(trace.peaks, trace.device_kind, trace.backend)
    add_roofline(rows, hlo.module_of, trace.op_costs, peaks, trace.backend)
    _rank(rows)
    return OpStats(
        table_data=TableLater(rows), step_time_us=step_time_us, step_times_us=steps.times_us,
        num_steps=int(steps.count), step_source=steps.source, per_step_data=PerStepLater.of(totals.steps, totals.step_ns, rows),
        modules=parsed,
        compile_events=trace.compile_events, backend=trace.backend, run=run, source_path=source_path,
        device_kind=trace.device_kind, warnings=tuple(notes), versions=trace.versions,
        num_devices=trace.num_devices, peaks=peaks,
        # (None where the hosts were read without their parts of it: a command that does not read it.)
        breakdown=finish_breakdown(totals.breakdown, steps.source, trace.backend, device_rank,
                                   totals.slice_sums) if totals.breakdown
        else None,
    )


def _lookup(trace: Trace, parsed: tuple[HloModule, ...], op_texts: Iterable[tuple[str, int, str, str]]) -> _Hlo:
    by_name: dict[str, HloModule] = {}
    for m in parsed:
        by_name.setdefault(m.name, m)
    op_text: dict[tuple[str, int, str], str] = {}
    for module_name, pid, op, text in (*trace.op_expressions, *op_texts):
        op_text.setdefault((module_name, pid, op), text)
    op_source = {(m, p, o): s for m, p, o, s in trace.op_sources}
    return _Hlo({(m.name, m.program_id): m for m in parsed}, by_name, op_text, op_source)


def _steps(totals: EventTotals, notes: list[str]) -> _Steps:
    """The step count and wall times of the totals; the whole trace is one step when none is found."""
    times, count, source = totals.step_times_us, totals.step_count, totals.choice.source
    if source == "module-executions" and totals.choice.main is not None:
        main_module, main_pid = totals.choice.main
        notes.append(f"no step annotations: steps are the {count} executions of {main_module}({main_pid})")
    if count == 0 or not times:
        count, times = 1, StepTimes((float(totals.span_ns[1] - totals.span_ns[0]) / 1e3,))
        notes.append("no steps found: the whole trace counts as one step")
    return _Steps(times, count, source)


@dataclass(frozen=True, slots=True)
class _Totals:
    """One op's sums, as :func:`_row` reads them."""

    module: str
    program_id: int
    op: str
    occurrences: int
    total_ns: float
    self_ns: float
    devices: int
    group: int


def _row(rec: Any, hlo: _Hlo, num_steps: int, step_time_us: float) -> tuple[dict[str, Any], str]:
    """One row of the table (without rank and canonical key) and its body digest."""
    module_name = str(rec.module)
    pid = int(rec.program_id)  # a Python int: uint64 ids stay exact
    op = str(rec.op)
    module = hlo.by_key.get((module_name, pid if pid >= 0 else None)) or (
        hlo.by_name.get(module_name) if pid < 0 else None)
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
        text = hlo.op_text.get((module_name, pid, op)) or hlo.op_text.get(("", pid, op)) or ""
        opcode, result_shape, operand_list = parse_op_text(text)
        category = categorize_opcodes({opcode}) if opcode and opcode != "fusion" else categorize(None, None, op)
    shape = result_shape.text() if result_shape is not None else ""
    operand_text = "; ".join(o.text() for o in operand_list)
    bytes_written = result_shape.nbytes if result_shape is not None else 0
    bytes_read = sum(o.nbytes for o in operand_list)
    row = {
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
        "source": _source(module, inst) if inst is not None else hlo.op_source.get((module_name, pid, op), ""),
        "self_time_us": float(rec.self_ns) / 1e3,
        "devices": devices,
        "runs_per_step": int(rec.occurrences) / num_steps / devices,
        "group": int(rec.group),
    }
    return row, body_digest(module, inst, operand_text)


def _source(module: HloModule | None, inst: HloInstruction | None) -> str:
    """The op's line: for a fusion, that of the op that costs inside it (its dot or reduction), not
    the fusion's own metadata (its root's, often a framework helper's); the first frame outside the
    frameworks. Empty when that op has no line: never another op's."""
    if inst is None:
        return ""
    return (key_instruction(module, inst) if module is not None else inst).source


def _missing_modules(rows: list[dict[str, Any]], hlo: _Hlo) -> list[tuple[str, int | None]]:
    """(module, program id) of rows without a shape whose module the trace does not hold."""
    return sorted({(r["module"], r["program_id"]) for r in rows
                   if not r["shape"] and (r["module"], r["program_id"]) not in hlo.by_key},
                  key=lambda mp: (mp[0], mp[1] if mp[1] is not None else -1))


def _rank(rows: list[dict[str, Any]]) -> None:
    """Sort the rows by time per step (ties: module, op, program id) and number them from 1."""
    rows.sort(key=lambda r: (-r["time_per_step_us"], r["module"], natural(r["op"]),
                             r["program_id"] if r["program_id"] is not None else -1))
    for rank, r in enumerate(rows, start=1):
        r["rank"] = rank
