"""Where each backend puts its HLO op events, step marks and compile work in an XSpace.

- XLA:CPU: host events on ``/host:CPU`` lines named after XLA's thread pools, each with stats
  ``hlo_op``, ``hlo_module``, ``program_id``, ``run_id``. Step marks are host events with a
  ``step_num`` stat (``jax.profiler.StepTraceAnnotation``); compile work is the Python tracer's
  ``cache_miss``, ``_pjit_lower``, ``backend_compile``... (and XLA's own compile TraceMes).
- TPU/GPU: device planes (``/device:TPU:0``, ``/device:GPU:0``); the ``XLA Ops`` line when the plane
  has one (its events are named after the op; the module comes from a stat or from the enclosing
  ``XLA Modules`` event named ``module(program_id)``), otherwise every event that carries an
  ``hlo_op`` stat (GPU kernels).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from hlo_doctor.trace.model import CompileEvent, StepMark
from hlo_doctor.trace.xspace import (
    MODULE_WITH_ID,
    XPlane,
    event_names,
    stat_items,
    stat_names,
    stat_value,
)

# Substrings of Python-tracer / TraceMe event names that mean compile work (jax-xprof-facts.md).
COMPILE_MARKERS: tuple[str, ...] = (
    "cache_miss", "_pjit_lower", "compile_or_get_cached", "backend_compile", "_cached_compilation",
    "lower_sharding_computation", "XlaCompile", "PjRtCpuClient::Compile", "PjRtStreamExecutorClient::Compile",
    "TfrtCpuClient::Compile",
)
# Host events that are neither ops, steps nor compile work (thread-pool bookkeeping, thunk ends).
_NOISE_PREFIXES = ("ThreadpoolListener::", "end: ")
_COMPILE_RE = re.compile("|".join(re.escape(m) for m in COMPILE_MARKERS))
# Device-plane lines that are not op events.
_NOT_OP_LINES = frozenset({"XLA Modules", "Steps", "Framework Ops", "Framework Name Scope", "Source code"})
_OP_TEXT = re.compile(r"^\s*%?([\w.\-]+)\s*=\s*\S")

# One op event of a line: (start ns, duration ns, module, op, program id, run id).
LineOp = tuple[float, float, str, str, int, int]


@dataclass(slots=True)
class OpColumns:
    """The op-event columns while they are being read (becomes :class:`OpEvents`)."""

    host: list[str] = field(default_factory=list)
    device: list[str] = field(default_factory=list)
    module: list[str] = field(default_factory=list)
    program_id: list[int] = field(default_factory=list)
    op: list[str] = field(default_factory=list)
    start_ns: list[float] = field(default_factory=list)
    duration_ns: list[float] = field(default_factory=list)
    self_ns: list[float] = field(default_factory=list)
    run_id: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.op)

    def append_line(self, events: list[LineOp], host: str, device: str) -> None:
        """Append one line's op events with their self times.

        Nesting is resolved per line with a stack: events on one line (thread, stream) are properly
        nested or disjoint, so a child's time is subtracted from its innermost enclosing event.
        """
        events.sort(key=lambda e: (e[0], -e[1]))
        stack: list[tuple[float, int]] = []  # (end, index into the columns)
        for start, dur, module, op, pid, run in events:
            end = start + dur
            while stack and stack[-1][0] <= start:
                stack.pop()
            idx = len(self.op)
            if stack and end <= stack[-1][0]:
                self.self_ns[stack[-1][1]] -= dur
            self.host.append(host)
            self.device.append(device)
            self.module.append(module)
            self.program_id.append(pid)
            self.op.append(op)
            self.start_ns.append(start)
            self.duration_ns.append(dur)
            self.self_ns.append(dur)
            self.run_id.append(run)
            stack.append((end, idx))


def split_op_text(text: str) -> tuple[str, str]:
    """``("fusion.1", text)`` for an op's HLO text (``%fusion.1 = bf16[8]{0} fusion(...)``), else
    ``(text, "")``."""
    m = _OP_TEXT.match(text)
    if m:
        return m.group(1), text.strip()
    return text, ""


def split_module(name: str) -> tuple[str, int | None]:
    """``("jit_f", 12)`` for ``jit_f(12)``; ``(name, None)`` without an id."""
    m = MODULE_WITH_ID.match(name)
    if m:
        return m.group(1), int(m.group(2))
    return name, None


def device_plane_backend(name: str) -> str:
    """``tpu`` or ``gpu`` for a device plane's name."""
    lowered = name.lower()
    if "tpu" in lowered:
        return "tpu"
    if "gpu" in lowered:
        return "gpu"
    return "tpu"


def _event_times(line: object, ev: object) -> tuple[float, float]:
    # Offsets are picoseconds from the line's timestamp (ns); the result is ns on the host clock.
    start = (line.timestamp_ns * 1000 + ev.offset_ps) / 1000  # type: ignore[attr-defined]
    return start, ev.duration_ps / 1000  # type: ignore[attr-defined]


# The stats of a host event that say what it is; the others are not read (a host plane holds
# millions of events with about ten stats each).
_HOST_STATS = frozenset({"hlo_op", "hlo_module", "program_id", "run_id", "step_num", "module"})


def read_host_plane(plane: XPlane, host: str, want_ops: bool, cols: OpColumns,
                    steps: list[StepMark], compiles: list[CompileEvent]) -> None:
    """XLA:CPU op events (when ``want_ops``), step marks and compile work of one host plane."""
    pname = plane.name
    names = event_names(plane)
    snames = stat_names(plane)
    wanted = {sid: name for sid, name in snames.items() if name in _HOST_STATS}
    for line in plane.lines:
        lname = line.name
        line_ops: list[LineOp] = []
        for ev in line.events:
            name = names.get(ev.metadata_id, "")
            # Python-tracer events ("$file.py:12 func") carry no stats worth reading.
            if name.startswith(_NOISE_PREFIXES):
                continue
            sd: dict[str, object] = {}
            if not name.startswith("$"):
                for stat in ev.stats:
                    key = wanted.get(stat.metadata_id)
                    if key is not None:
                        sd[key] = stat_value(stat, snames)
            if sd:
                op = sd.get("hlo_op")
                if op is not None:
                    if want_ops:
                        pid = sd.get("program_id")
                        run = sd.get("run_id")
                        start, dur = _event_times(line, ev)
                        line_ops.append((start, dur, str(sd.get("hlo_module", "")), str(op),
                                         int(pid) if pid is not None else -1,  # type: ignore[call-overload]
                                         int(run) if run is not None else -1))  # type: ignore[call-overload]
                    continue
                if "step_num" in sd:
                    try:
                        num = int(sd["step_num"])  # type: ignore[call-overload]
                    except (TypeError, ValueError):
                        num = -1
                    start, dur = _event_times(line, ev)
                    steps.append(StepMark(host, name, num, start, dur))
                    continue
            if _COMPILE_RE.search(name):
                module = str(sd.get("hlo_module", sd.get("module", "")))
                start, dur = _event_times(line, ev)
                compiles.append(CompileEvent(
                    name=name, start_us=start / 1e3, duration_us=dur / 1e3,
                    module=module, detail=f"{host} {pname} {lname}"))
        if line_ops:
            cols.append_line(line_ops, host, pname)


def _module_spans(plane: XPlane, names: dict[int, str], snames: dict[int, str]) -> list[tuple[float, float, str, int]]:
    """(start, end, module, program id) of each ``XLA Modules`` event, sorted."""
    spans: list[tuple[float, float, str, int]] = []
    for line in plane.lines:
        if line.name != "XLA Modules":
            continue
        for ev in line.events:
            module, pid = split_module(names.get(ev.metadata_id, ""))
            sd = dict(stat_items(ev.stats, snames)) if ev.stats else {}
            if sd.get("program_id") is not None:
                pid = int(sd["program_id"])  # type: ignore[call-overload]
            start, dur = _event_times(line, ev)
            spans.append((start, start + dur, module, pid if pid is not None else -1))
    spans.sort()
    return spans


def read_device_plane(plane: XPlane, metadata: dict[str, tuple[str, dict[str, object]]],
                      expressions: dict[tuple[str, int, str], str], host: str, cols: OpColumns) -> None:
    """TPU/GPU op events of one device plane; op HLO texts go into ``expressions``."""
    pname = plane.name
    names = event_names(plane)
    snames = stat_names(plane)
    lines = list(plane.lines)
    xla_ops = [ln for ln in lines if ln.name == "XLA Ops"]
    module_spans = _module_spans(plane, names, snames)
    span_starts = [s[0] for s in module_spans]

    def enclosing(start: float) -> tuple[str, int, int]:
        i = bisect.bisect_right(span_starts, start) - 1
        if i >= 0 and module_spans[i][1] >= start:
            return module_spans[i][2], module_spans[i][3], i
        return "", -1, -1

    # With an "XLA Ops" line, every op is there once; stream lines would repeat them as kernels.
    for ln in (xla_ops or lines):
        if ln.name in _NOT_OP_LINES:
            continue
        line_ops: list[LineOp] = []
        for ev in ln.events:
            name = names.get(ev.metadata_id, "")
            display, meta_stats = metadata.get(name, ("", {}))
            own = dict(stat_items(ev.stats, snames)) if ev.stats else {}
            sd = {**meta_stats, **own} if meta_stats else own
            op = sd.get("hlo_op")
            if op is None:
                if not xla_ops:
                    continue
                # On TPU the op name is the metadata's display name; the name may be its HLO text.
                op = display or name
            op, text = split_op_text(str(op))
            if not text:
                text = split_op_text(name)[1] or str(sd.get("long_name", "") or "")
            module = str(sd.get("hlo_module", ""))
            pid_value = sd.get("program_id")
            pid = int(pid_value) if pid_value is not None else -1  # type: ignore[call-overload]
            run_value = sd.get("run_id")
            run = int(run_value) if run_value is not None else -1  # type: ignore[call-overload]
            start, dur = _event_times(ln, ev)
            if not module or pid < 0 or run < 0:
                enc_module, enc_pid, enc_index = enclosing(start)
                run = run if run >= 0 else enc_index
                module = module or enc_module
                pid = pid if pid >= 0 else enc_pid
            module, suffix_pid = split_module(module)
            if pid < 0 and suffix_pid is not None:
                pid = suffix_pid
            if text:
                expressions.setdefault((module, pid, op), text)
            line_ops.append((start, dur, module, op, pid, run))
        if line_ops:
            cols.append_line(line_ops, host, pname)
