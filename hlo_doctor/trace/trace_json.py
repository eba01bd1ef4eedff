"""Trace-viewer / Perfetto JSON read into the same :class:`Trace` the xplane reader returns.

jax's ``<host>.trace.json.gz`` and ``perfetto_trace.json.gz`` and xprof's ``trace_viewer`` export
(:mod:`.json_events` streams them), read by the xplane's conventions (docs/profile.md, "Trace JSON
input"): TPU ops are a device's ``XLA Ops`` events (``long_name``: the op's HLO text), GPU ops the
events with an ``hlo_op`` arg, XLA:CPU ops host events with ``hlo_op``; the device clock args win.
The converter leaves program ids out: an op's id is that of its ``XLA Modules`` event
``module(program_id)`` where the file has one (TPU, xprof's derived GPU lines), else unknown. HLO
modules, plane stats and versions are not in the file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from hlo_doctor.core.errors import NoOpsError
from hlo_doctor.trace.columns import OpColumns
from hlo_doctor.trace.compiles import annotate_compiles
from hlo_doctor.trace.conventions import COMPILE_MARKERS, device_plane_backend, split_module, split_op_text
from hlo_doctor.trace.json_decode import TRACE_JSON_SUFFIXES, is_trace_json
from hlo_doctor.trace.json_events import (
    INFO_KEYS,
    NONE,
    EventFile,
    EventLine,
)
from hlo_doctor.trace.json_threads import is_derived_line, is_device_plane, pick, remember, thread_of_line
from hlo_doctor.trace.model import CompileEvent, HostDispatch, StepMark, Trace
from hlo_doctor.trace.python_frames import DriverThread
from hlo_doctor.trace.source_args import source_line, stack_files
from hlo_doctor.trace.xspace import program_id_of

_COMPILE = re.compile("|".join(re.escape(m) for m in COMPILE_MARKERS))
_DISPATCH = re.compile(r"^PjitFunction\((.+)\)$")
_NOISE_PREFIXES = ("ThreadpoolListener::", "end: ")
_FROM_STREAM = re.compile(r" - from #(\d+)$")
_STREAM = re.compile(r"^Stream #(\d+)")
# Device lines that are not op events (xprof counts only XLA Ops on TPU).
_NOT_OP_LINES = frozenset({"XLA Modules", "Steps", "Framework Ops", "Framework Name Scope", "Source code",
                           "Async XLA Ops", "XLA TraceMe", "Launch Stats"})
_NO_ID = -1

__all__ = ["TRACE_JSON_SUFFIXES", "is_trace_json", "read_trace_json"]


@dataclass(frozen=True, slots=True)
class _Op:
    op: str
    text: str
    module: str
    program_id: int
    has_long_name: bool
    source: str
    """The op's line from its ``source`` / ``source_stack`` args (:mod:`.source_args`), or empty."""


@dataclass(slots=True)
class _Spans:
    """``XLA Modules`` events of one device (or one GPU stream), sorted by start."""

    starts: np.ndarray
    ends: np.ndarray
    what: list[tuple[str, int]]
    """(module, program id) of each span."""
    raw: bool
    """Written by the profiler (TPU): a span is one execution (the run id), as in the xplane."""


@dataclass(slots=True)
class _Builder:
    """Accumulates the files of one capture into the fields of a :class:`Trace`."""

    cols: OpColumns = field(default_factory=OpColumns)
    expressions: dict[tuple[str, int, str], str] = field(default_factory=dict)
    sources: dict[tuple[str, int, str], str] = field(default_factory=dict)
    stack_files: set[str] = field(default_factory=set)
    steps: list[StepMark] = field(default_factory=list)
    device_steps: list[StepMark] = field(default_factory=list)
    compiles: list[CompileEvent] = field(default_factory=list)
    devices: set[tuple[str, str]] = field(default_factory=set)
    backends: set[str] = field(default_factory=set)
    dispatch: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)
    """``PjitFunction(<name>)`` spans (start, end, name) per host line."""
    threads: dict[str, list[DriverThread]] = field(default_factory=dict)
    """Host -> its lines with frames, dispatches or compiles (:mod:`.json_threads`)."""
    counts: dict[str, int] = field(default_factory=dict)
    """Events the reader had to work around, by what was missing (said in the warnings)."""
    notes: list[str] = field(default_factory=list)

    def count(self, what: str, n: int) -> None:
        if n:
            self.counts[what] = self.counts.get(what, 0) + n

    def add_file(self, f: EventFile) -> None:
        default_host = f.host
        by_pid: dict[object, list[tuple[object, str, EventLine]]] = {}
        for (pid, tid), line in f.lines.items():
            by_pid.setdefault(pid, []).append((tid, f.threads.get((pid, tid), ""), line))
        planes: dict[object, tuple[str, str]] = {}
        for pid in by_pid:
            name = f.processes.get(pid, "")
            # xprof's streaming export prefixes the host: "vm /device:GPU:0".
            host, sep, rest = name.partition(" /")
            planes[pid] = (host, "/" + rest) if sep and not name.startswith("/") else \
                (default_host, name or f"pid {pid}")
        before = len(self.cols)
        idle: list[str] = []
        for pid, lines in by_pid.items():
            host, plane = planes[pid]
            if is_device_plane(plane) and not self._device(f, host, plane, lines):
                idle.append(plane)
        device_had_ops = len(self.cols) > before
        if device_had_ops and idle:
            self.notes.append(f"{f.origin}: no op events on {', '.join(sorted(idle))}")
        for pid, lines in by_pid.items():
            host, plane = planes[pid]
            if not is_device_plane(plane):
                n = len(self.cols)
                self._host(f, host, plane, lines, not device_had_ops)
                if len(self.cols) > n:
                    self.devices.add((host, plane))
        if not device_had_ops and len(self.cols) > before:
            self.backends.add("cpu")
        self.count("events without a numeric ts/dur (skipped)", f.bad_times)
        self.count("traceEvents entries that are not objects (skipped)", f.bad_events)
        self.stack_files |= stack_files(f.sources.values())

    # -- devices ---------------------------------------------------------------------------------

    def _device(self, f: EventFile, host: str, plane: str, lines: list[tuple[object, str, EventLine]]) -> bool:
        spans: dict[str | None, _Spans] = {}
        for tid, tname, line in lines:
            if tname == "XLA Modules" or tname.startswith("XLA Modules - from #"):
                m = _FROM_STREAM.search(tname)
                self._add_spans(spans, m.group(1) if m else None, f, line)
            elif tname == "Steps" and not is_derived_line(tid, tname):
                # The profiler's own Steps line (TPU); xprof derives one from host marks on GPU.
                self._steps(f, host, plane, line)
        xla_ops = [x for x in lines if x[1] == "XLA Ops"]
        op_lines = xla_ops or [x for x in lines if x[1] not in _NOT_OP_LINES and not is_derived_line(x[0], x[1])]
        added = 0
        for _tid, tname, line in op_lines:
            m = _STREAM.match(tname)
            key = m.group(1) if m and m.group(1) in spans else None
            chosen = spans.get(key) or (next(iter(spans.values())) if len(spans) == 1 else None)
            added += self._device_ops(f, host, plane, line, bool(xla_ops), chosen)
        if added:
            self.devices.add((host, plane))
            self.backends.add(device_plane_backend(plane))
        return bool(added)

    def _add_spans(self, spans: dict[str | None, _Spans], key: str | None, f: EventFile, line: EventLine) -> None:
        starts, durs = line.times()
        what: list[tuple[str, int]] = []
        for code in line.names.tolist():
            module, suffix = split_module(str(f.names.values[code]))
            pid = program_id_of(suffix) if suffix is not None else None
            what.append((module, pid if pid is not None else _NO_ID))
        ends = starts + durs
        if (old := spans.get(key)) is not None:
            starts, ends, what = np.concatenate([old.starts, starts]), np.concatenate([old.ends, ends]), old.what + what
        order = np.argsort(starts, kind="stable")
        spans[key] = _Spans(starts[order], ends[order], [what[i] for i in order.tolist()], key is None)

    def _steps(self, f: EventFile, host: str, plane: str, line: EventLine) -> None:
        starts, durs = line.times()
        groups = line.column("group").tolist()
        for i, code in enumerate(line.names.tolist()):
            name = str(f.names.values[code])
            num = groups[i]
            if num == NONE:
                num = int(name) if name.isdigit() else -1
            self.device_steps.append(StepMark(host, name, num, float(starts[i]), float(durs[i]), device=plane))

    def _op(self, f: EventFile, name_code: int, info_code: int, op_line: bool) -> _Op | None:
        info = f.infos.values[info_code] or (None,) * len(INFO_KEYS)
        hlo_op, hlo_module, long_name, pid_arg, _ = info
        if hlo_op is None and not op_line:
            return None
        op, text = split_op_text(hlo_op or str(f.names.values[name_code]))
        if not text and long_name:
            text = split_op_text(long_name)[1]
        module, suffix = split_module(hlo_module or "")
        pid = program_id_of(pid_arg) if pid_arg is not None else None
        if pid is None and suffix is not None:
            pid = program_id_of(suffix)
        return _Op(op, text, module, pid if pid is not None else _NO_ID, bool(long_name), source_line(f.sources.get(info_code)))

    def _device_ops(self, f: EventFile, host: str, plane: str, line: EventLine, op_line: bool,
                    spans: _Spans | None) -> int:
        n = len(line.names)
        if not n:
            return 0
        width = len(f.infos.values)
        pairs = line.names * width + line.infos
        uniq, which = np.unique(pairs, return_inverse=True)
        infos = [self._op(f, *divmod(int(p), width), op_line) for p in uniq.tolist()]
        keep = np.fromiter((o is not None for o in infos), bool, len(infos))[which]
        if not keep.any():
            return 0
        starts, durs = line.times()
        where = np.full(n, -1, np.int64)
        what: list[tuple[str, int]] = []
        if spans is not None and len(spans.what):
            what = spans.what
            pos = np.searchsorted(spans.starts, starts, side="right") - 1
            inside = (pos >= 0) & (spans.ends[np.maximum(pos, 0)] >= starts)
            where = np.where(inside, pos, -1)
            # An op that names its module takes the id of that module's last span starting before
            # it: xprof derives GPU module spans from kernels, and a memcpy may end the program.
            op_module = np.array([o.module if o is not None else "" for o in infos], dtype=object)[which]
            for module in {o.module for o in infos if o is not None and o.module}:
                of = np.flatnonzero(np.array([m == module for m, _ in what], bool))
                on = op_module == module
                if len(of) and on.any():
                    k = np.searchsorted(spans.starts[of], starts[on], side="right") - 1
                    where[on] = np.where(k >= 0, of[np.maximum(k, 0)], -1)
            run = np.where(inside, pos, -1) if spans.raw else np.full(n, -1, np.int64)
        else:
            run = np.full(n, -1, np.int64)
        # Per distinct (op, (module, program id) of its enclosing span): module, program id and op
        # codes. Spans are many (one per execution), their (module, id) pairs few.
        kinds: dict[tuple[str, int], int] = {}
        kind_of = np.fromiter((kinds.setdefault(w, len(kinds)) for w in what), np.int64, len(what))
        kind_list = list(kinds)
        combos = which.astype(np.int64) * (len(kind_list) + 1) + 1 + \
            (np.where(where >= 0, kind_of[np.maximum(where, 0)], -1) if len(what) else where)
        cuniq, inverse = np.unique(combos, return_inverse=True)
        codes = np.empty((len(cuniq), 3), np.int64)
        no_pid = np.zeros(len(cuniq), bool)
        for u, combo in enumerate(cuniq.tolist()):
            k, s = divmod(combo, len(kind_list) + 1)
            codes[u], no_pid[u] = self._codes(infos[k], kind_list[s - 1] if s > 0 else None)
        occ = np.bincount(which[keep], minlength=len(infos))
        if op_line:
            self.count("XLA Ops events without long_name (no HLO text: no shape)",
                       sum(int(occ[k]) for k, o in enumerate(infos) if o is not None and not o.has_long_name))
        else:
            self.count("op events without hlo_module (module from the enclosing XLA Modules event, if any)",
                       sum(int(occ[k]) for k, o in enumerate(infos) if o is not None and not o.module))
        self.count("op events without a program id", int((no_pid[inverse] & keep).sum()))
        self.cols.add(host, plane, codes[inverse, 0][keep], codes[inverse, 1][keep], codes[inverse, 2][keep],
                      starts[keep], durs[keep], run[keep], np.ones(int(keep.sum()), np.int32))
        return int(keep.sum())

    def _codes(self, info: _Op | None, span: tuple[str, int] | None) -> tuple[tuple[int, int, int], bool]:
        """Codes of (module, program id, op), completed from the enclosing module span; no id?"""
        if info is None:
            return (0, 0, 0), False
        module, pid = info.module, info.program_id
        if span is not None and pid == _NO_ID and (not module or module == span[0]):
            module, pid = span
        if info.text:
            self.expressions.setdefault((module, pid, info.op), info.text)
        if info.source:
            self.sources.setdefault((module, pid, info.op), info.source)
        cols = self.cols
        return (cols.modules.code(module), cols.program_ids.code(pid), cols.ops.code(info.op)), pid == _NO_ID

    # -- hosts -----------------------------------------------------------------------------------

    def _host(self, f: EventFile, host: str, plane: str, lines: list[tuple[object, str, EventLine]],
              want_ops: bool) -> None:
        values = f.infos.values
        is_op_info = np.fromiter((v is not None and v[0] is not None for v in values), bool, len(values))
        for tid, tname, line in lines:
            infos, names = line.infos, line.names
            is_op = is_op_info[infos]
            if want_ops and is_op.any():
                self._host_ops(f, host, plane, line, infos, is_op)
            if (thread := thread_of_line(f, host, plane, tid, tname, line)) is not None:
                self.threads.setdefault(host, []).append(thread)
            starts, durs = line.ts, line.dur
            steps = line.column("step")
            found: list[CompileEvent] = []
            # Python frames are kept for the threads; only steps, compiles and dispatches are read here.
            codes = np.unique(names)
            marks = codes[np.fromiter((bool(_COMPILE.search(n := str(f.names.values[c])) or _DISPATCH.match(n))
                                       for c in codes.tolist()), bool, len(codes))]
            for i in np.flatnonzero(~is_op & (np.isin(names, marks) | (steps != NONE))).tolist():
                name = str(f.names.values[names[i]])
                if name.startswith(_NOISE_PREFIXES):
                    continue
                if steps[i] != NONE:
                    num = int(steps[i])
                    # xprof names a step mark "decode 3" (its step_name); jax writes "decode".
                    self.steps.append(StepMark(host, name.removesuffix(f" {num}") or name, num,
                                               float(starts[i]), float(durs[i])))
                elif _COMPILE.search(name):
                    info = values[infos[i]] or (None,) * len(INFO_KEYS)
                    pid = program_id_of(info[3]) if info[3] is not None else None
                    found.append(CompileEvent(
                        name=name, start_us=float(starts[i]) / 1e3, duration_us=float(durs[i]) / 1e3,
                        module=str(info[1] or info[4] or ""), detail=f"{host} {plane} {tname}",
                        thread=f"{host} {plane} {tid}", program_id=pid))
                elif m := _DISPATCH.match(name):
                    self.dispatch.setdefault(f"{host} {plane} {tid}", []).append(
                        (float(starts[i]), float(starts[i] + durs[i]), m.group(1)))
            self.compiles.extend(_dispatched(found, self.dispatch.get(f"{host} {plane} {tid}", [])))

    def _host_ops(self, f: EventFile, host: str, plane: str, line: EventLine, infos: np.ndarray,
                  is_op: np.ndarray) -> None:
        uniq, inverse = np.unique(infos[is_op], return_inverse=True)
        codes = np.empty((len(uniq), 3), np.int64)
        cols = self.cols
        for u, code in enumerate(uniq.tolist()):
            hlo_op, hlo_module, _, pid_arg, _ = f.infos.values[code]
            pid = program_id_of(pid_arg) if pid_arg is not None else None
            if line_of := source_line(f.sources.get(code)):
                self.sources.setdefault((str(hlo_module or ""), pid if pid is not None else _NO_ID, str(hlo_op)), line_of)
            codes[u] = (cols.modules.code(str(hlo_module or "")),
                        cols.program_ids.code(pid if pid is not None else _NO_ID), cols.ops.code(str(hlo_op)))
        per_info = np.bincount(inverse, minlength=len(uniq))
        self.count("op events without a program id", int(per_info[codes[:, 1] == cols.program_ids.code(_NO_ID)].sum()))
        self.count("op events without hlo_module",
                   int(sum(int(per_info[u]) for u, c in enumerate(uniq.tolist()) if not f.infos.values[c][1])))
        n = int(is_op.sum())
        self.cols.add(host, plane, codes[inverse, 0], codes[inverse, 1], codes[inverse, 2],
                      line.ts[is_op], line.dur[is_op], line.run[is_op], np.ones(n, np.int32))

    def host_dispatch(self) -> tuple[HostDispatch, ...]:
        """Dispatch spans per program, as :func:`~hlo_doctor.trace.dispatch.read_host_dispatch`
        counts them on an xplane: outermost spans of one name per line."""
        calls: dict[str, int] = {}
        total: dict[str, float] = {}
        for spans in self.dispatch.values():
            open_until: dict[str, float] = {}
            for start, end, name in sorted(spans):
                if start < open_until.get(name, -math.inf):
                    continue  # nested inside an outer span of the same program
                open_until[name] = end
                module = f"jit_{name}"
                calls[module] = calls.get(module, 0) + 1
                total[module] = total.get(module, 0.0) + (end - start) / 1e3
        return tuple(HostDispatch(m, calls[m], total[m]) for m in sorted(calls))

    def trace(self, paths: Sequence[Path]) -> Trace:
        """The :class:`Trace` of the files added; :class:`InputError` when they hold no op events."""
        if not len(self.cols):
            raise NoOpsError(f"{', '.join(str(p) for p in paths)}: no HLO op events (no XLA Ops events on a "
                             "device, no events with an hlo_op arg)",
                             "pass the trace of a window in which compiled JAX code ran; xprof's streaming "
                             "export (trace_viewer@) drops the args: export with trace_viewer")
        backend = next((b for b in ("tpu", "gpu") if b in self.backends), "cpu")
        warnings = [*self.notes, "a trace JSON holds no HLO modules: shapes and bytes come from each op's "
                    "long_name where the trace gives one; rules that read whole modules do not run"]
        warnings += [f"{n} {what}" + (" (a trace JSON leaves program ids out: rows are keyed by module and op)"
                                      if what.endswith("program id") else "")
                     for what, n in sorted(self.counts.items())]
        self.compiles.sort(key=lambda c: c.start_us)
        self.steps.sort(key=lambda s: (s.host, s.start_ns))
        self.device_steps.sort(key=lambda s: (s.host, s.device, s.start_ns))
        ops = self.cols.finish()
        return Trace(
            paths=tuple(str(p) for p in paths), backend=backend, device_kind=backend, ops=ops, steps=tuple(self.steps),
            compile_events=annotate_compiles(self.compiles, self.steps, ops), module_protos=(), versions=(),
            op_expressions=tuple((m, p, o, e) for (m, p, o), e in sorted(self.expressions.items())),
            op_sources=tuple((m, p, o, s) for (m, p, o), s in sorted(self.sources.items())),
            stack_files=tuple(sorted(self.stack_files)),
            device_steps=tuple(self.device_steps), num_devices=len(self.devices), warnings=tuple(warnings),
        )


def _dispatched(found: list[CompileEvent], spans: list[tuple[float, float, str]]) -> list[CompileEvent]:
    """Compile events with the name jax dispatched: the innermost ``PjitFunction`` span around each
    on its thread (as on an xplane, not the Python frames around it)."""
    out = []
    for e in found:
        start, end = e.start_us * 1e3, (e.start_us + e.duration_us) * 1e3
        around = [s for s in spans if s[0] <= start and end <= s[1] and (s[0], s[1]) != (start, end)]
        out.append(replace(e, function=max(around)[2]) if around else e)
    return out


def read_events(paths: Sequence[Path]) -> _Builder:
    builder = _Builder()
    for path in paths:
        builder.add_file(EventFile(Path(path)).read())
    return builder


def read_trace_json(paths: Sequence[Path]) -> Trace:
    """Read trace JSON files of one capture (one per host) into a :class:`Trace`.

    Raises :class:`InputError` naming the file for what is not a trace (no ``traceEvents``), a
    truncated gzip or JSON, and a trace without HLO op events.
    """
    builder = read_events(paths)
    trace = builder.trace(paths)
    remember(paths, builder.host_dispatch(), pick(builder.threads))
    return trace
