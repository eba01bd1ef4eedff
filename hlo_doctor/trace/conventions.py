"""Where each backend puts its HLO op events, step marks and compile work in an XSpace.

- XLA:CPU: host events on ``/host:CPU`` lines named after XLA's thread pools, each with stats
  ``hlo_op``, ``hlo_module``, ``program_id``, ``run_id``. Step marks are host events with a
  ``step_num`` stat (``jax.profiler.StepTraceAnnotation``); compile work is the Python tracer's
  ``cache_miss``, ``_pjit_lower``, ``backend_compile``... (and XLA's own compile TraceMes).
- TPU/GPU: device planes (``/device:TPU:0``, ``/device:GPU:0``), read by
  :mod:`hlo_doctor.trace.device`.

Also the names shared by both: an op's HLO text, ``module(program_id)``.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import replace

from hlo_doctor.trace.columns import OpColumns
from hlo_doctor.trace.host_columns import HostLineSink, read_host_line
from hlo_doctor.trace.model import CompileEvent, StepMark
from hlo_doctor.trace.xspace import (
    MODULE_WITH_ID,
    XPlane,
    event_names,
    stat_names,
    stat_value,
)

# Substrings of Python-tracer / TraceMe event names that mean XLA compiled a program: jax's
# ``backend_compile_and_load`` (``backend_compile`` in older releases) and the PJRT clients' own
# compile events (XLA:CPU's on a compiler thread, libtpu's nested in jax's on the same thread).
BACKEND_COMPILE_MARKERS: tuple[str, ...] = (
    "backend_compile", "XlaCompile", "PjRtCpuClient::Compile", "PjRtStreamExecutorClient::Compile",
    "TfrtCpuClient::Compile", "TfrtTpuCompiler::Compile", "PjRtCApiClient::Compile",
)
# The work around a compile: a dispatch that missed jax's fast path, tracing, lowering, the cache
# lookup. Alone (no backend compile inside) they are no compile: the slow path found its program.
WRAPPER_COMPILE_MARKERS: tuple[str, ...] = (
    "cache_miss", "_pjit_lower", "compile_or_get_cached", "_cached_compilation", "lower_sharding_computation",
)
# Substrings of Python-tracer / TraceMe event names that mean compile work (jax-xprof-facts.md).
COMPILE_MARKERS: tuple[str, ...] = WRAPPER_COMPILE_MARKERS + BACKEND_COMPILE_MARKERS
# jax's dispatch of a jitted function or an eager op (the C++ fast path): names what is compiled.
DISPATCH_PREFIX = "PjitFunction("
# Python frames kept per compile (its callers, innermost first).
_MAX_FRAMES = 16
# Host events that are neither ops, steps nor compile work (thread-pool bookkeeping, thunk ends).
_NOISE_PREFIXES = ("ThreadpoolListener::", "end: ")
_COMPILE_RE = re.compile("|".join(re.escape(m) for m in COMPILE_MARKERS))
# Device-plane lines that are not op events.
_NOT_OP_LINES = frozenset({"XLA Modules", "Steps", "Framework Ops", "Framework Name Scope", "Source code"})
_OP_TEXT = re.compile(r"^\s*%?([\w.\-]+)\s*=\s*\S")

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
        label = (f"{host} {pname} {line.name}", f"{host} {pname} {line.id}")
        found = read_host_line(line, names, snames, wanted, want_ops, host, pname, cols, steps, _NOISE_PREFIXES,
                               _COMPILE_RE, label)  # the compiled reader's columns (trace/host_columns.py)
        if found is None:  # else the line's events one message at a time
            sink = HostLineSink(line.timestamp_ns, want_ops, host, pname, cols, label)
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
                sink.take(name, sd, ev.offset_ps, ev.duration_ps, bool(_COMPILE_RE.search(name)))
            found = sink.finish(steps)
        if found:
            compiles.extend(_with_callers(line, names, found))


def _with_callers(line: object, names: dict[int, str], found: list[CompileEvent]) -> list[CompileEvent]:
    """``found`` (compile events of one line) with the dispatch and Python frames around each.

    A second pass over the line, only for lines that hold compile work: the spans enclosing a
    compile event (Python-tracer frames ``$file.py:12 func`` and ``PjitFunction(<name>)``) say what
    was compiled and who called it.
    """
    order = sorted(range(len(found)), key=lambda i: found[i].start_us)
    starts = [found[i].start_us * 1e3 for i in order]
    ends = [(found[i].start_us + found[i].duration_us) * 1e3 for i in order]
    around: list[list[tuple[float, float, str]]] = [[] for _ in order]
    for ev in line.events:  # type: ignore[attr-defined]
        name = names.get(ev.metadata_id, "")
        if not (name.startswith("$") or name.startswith(DISPATCH_PREFIX)):
            continue
        start, dur = _event_times(line, ev)
        end = start + dur
        # Targets starting inside this span; those that also end inside it are enclosed.
        for k in range(bisect_left(starts, start), bisect_right(starts, end)):
            if ends[k] <= end and not (starts[k] == start and ends[k] == end):
                around[k].append((start, end, name))
    out = list(found)
    for k, i in enumerate(order):
        function, frames = _callers(around[k])
        out[i] = replace(found[i], function=function, frames=frames)
    return out


def _callers(spans: list[tuple[float, float, str]]) -> tuple[str, tuple[str, ...]]:
    """(dispatched name, frames around that dispatch innermost first) from the enclosing spans."""
    outer_first = [name for _, _, name in sorted(spans, key=lambda s: (s[0], -s[1]))]
    inner = max((i for i, n in enumerate(outer_first) if n.startswith(DISPATCH_PREFIX)), default=-1)
    function = outer_first[inner][len(DISPATCH_PREFIX):-1] if inner >= 0 else ""
    k = inner
    # jax writes two nested spans for one dispatch: both are the dispatch, not its caller.
    while k > 0 and outer_first[k - 1] == outer_first[inner]:
        k -= 1
    callers = outer_first[:k] if inner >= 0 else [n for n in outer_first if not _COMPILE_RE.search(n)]
    return function, tuple(n.removeprefix("$") for n in reversed(callers))[:_MAX_FRAMES]

EXECUTE_MARKER = "ExecuteHelper"
"""In the name of the PJRT client's execution of a program inside a dispatch
(``CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice``): on XLA:CPU the host thread waits
there while XLA:CPU's threads run the program."""
