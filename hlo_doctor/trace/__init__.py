"""Events of HLO ops, step marks, compile work and HLO modules, read from xplane files.

An xplane (``<host>.xplane.pb``, an ``XSpace`` protobuf) holds planes -> lines -> events. What
hlo-doctor reads from it:

- HLO op events. XLA:CPU: host events on ``/host:CPU`` lines named after XLA's thread pools, each with
  stats ``hlo_op``, ``hlo_module``, ``program_id``, ``run_id``. TPU/GPU: device planes
  (``/device:TPU:0``, ``/device:GPU:0``); the ``XLA Ops`` line when the plane has one (its events are
  named after the op; the module comes from a stat or from the enclosing ``XLA Modules`` event named
  ``module(program_id)``), otherwise every event that carries an ``hlo_op`` stat (GPU kernels).
- Step marks: events with a ``step_num`` stat (``jax.profiler.StepTraceAnnotation``).
- Compile work inside the traced window: the Python tracer's events for ``cache_miss``,
  ``_pjit_lower``, ``compile_or_get_cached``, ``backend_compile``... (and XLA's own compile TraceMes).
- HLO modules: the ``/host:metadata`` plane keeps one event metadata per module, named
  ``module(program_id)``, whose ``Hlo Proto`` stat holds a serialized ``HloProto``. They are read
  straight from the protobuf wire format (no files written, nothing of the input touched).

Events are read with ``jax.profiler.ProfileData`` (C++); the metadata plane with a small wire-format
reader, because ``ProfileData`` does not expose event metadata.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.core.errors import InputError

XPLANE_SUFFIX = ".xplane.pb"

# Substrings of Python-tracer / TraceMe event names that mean compile work (jax-xprof-facts.md).
COMPILE_MARKERS: tuple[str, ...] = (
    "cache_miss", "_pjit_lower", "compile_or_get_cached", "backend_compile", "_cached_compilation",
    "lower_sharding_computation", "XlaCompile", "PjRtCpuClient::Compile", "PjRtStreamExecutorClient::Compile",
    "TfrtCpuClient::Compile",
)
# Host events that are neither ops, steps nor compile work (thread-pool bookkeeping, thunk ends).
_NOISE_PREFIXES = ("ThreadpoolListener::", "end: ")
_COMPILE_RE = re.compile("|".join(re.escape(m) for m in COMPILE_MARKERS))
_MODULE_WITH_ID = re.compile(r"^(.*)\((\d+)\)$")


@dataclass(frozen=True, slots=True)
class OpEvents:
    """HLO op events of one trace as parallel columns (a list per field: traces hold millions).

    Times are nanoseconds on the host's clock. ``self_ns`` is the duration minus the time of op
    events nested inside it on the same line (a while loop around its body's ops).
    """

    host: list[str]
    device: list[str]
    """The plane (``/host:CPU``, ``/device:TPU:0``) that ran the op."""
    module: list[str]
    program_id: list[int]
    op: list[str]
    start_ns: list[float]
    duration_ns: list[float]
    self_ns: list[float]
    run_id: list[int]
    """Which execution of the program the event belongs to (``run_id`` stat on XLA:CPU, the index
    of the enclosing ``XLA Modules`` event on a device plane); -1 when unknown."""

    def __len__(self) -> int:
        return len(self.op)


@dataclass(frozen=True, slots=True)
class StepMark:
    """One step annotation (``StepTraceAnnotation``)."""

    host: str
    name: str
    step_num: int
    start_ns: float
    duration_ns: float


@dataclass(frozen=True, slots=True)
class CompileEvent:
    """Compile work seen inside the traced window."""

    name: str
    start_us: float
    duration_us: float
    module: str = ""
    """The module being compiled, when the trace says."""
    detail: str = ""
    """Where it came from: host and line, plus any stats that name the function."""


@dataclass(frozen=True, slots=True)
class ModuleProto:
    """One HLO module stored in a trace's metadata plane."""

    name: str
    program_id: int | None
    hlo_proto: bytes
    host: str


@dataclass(frozen=True, slots=True)
class Trace:
    """Everything hlo-doctor reads from one or more xplane files of one capture (several hosts)."""

    paths: tuple[str, ...]
    backend: str
    """``cpu``, ``gpu`` or ``tpu``: where the op events came from."""
    device_kind: str
    ops: OpEvents
    steps: tuple[StepMark, ...]
    compile_events: tuple[CompileEvent, ...]
    module_protos: tuple[ModuleProto, ...]
    versions: tuple[tuple[str, str], ...]
    """``jax_version`` and friends, from the metadata plane's stats."""
    op_expressions: tuple[tuple[str, int, str, str], ...] = ()
    """(module, program id, op, HLO text of the op) that device traces carry in their event metadata
    (or xprof's ``hlo_stats`` gives): the shape's source when the trace holds no HLO module."""


# ---------------------------------------------------------------------------------------------
# Finding xplane files
# ---------------------------------------------------------------------------------------------

def find_xplanes(path: Path) -> list[Path]:
    """The xplane files of one capture: ``path`` itself, or the newest run under ``plugins/profile``.

    A directory may be an hlo-doctor run directory, a TensorBoard/xprof log directory (several runs:
    the newest by name wins, as xprof names them by time) or one run folder holding one file per host.
    """
    if not path.exists():
        raise InputError(f"{path}: no such file or directory",
                         "pass a run directory from 'hlo-doctor profile' or an .xplane.pb file")
    if path.is_file():
        return [path]
    direct = sorted(path.glob(f"*{XPLANE_SUFFIX}"))
    if direct:
        return direct
    runs = sorted({p.parent for p in path.glob(f"**/plugins/profile/*/*{XPLANE_SUFFIX}")},
                  key=lambda p: (p.name, str(p)))
    if not runs:
        raise InputError(f"{path}: no plugins/profile/<run>/*{XPLANE_SUFFIX} inside",
                         "pass a run directory from 'hlo-doctor profile', an xprof/TensorBoard log "
                         "directory or an .xplane.pb file")
    return sorted(runs[-1].glob(f"*{XPLANE_SUFFIX}"))


# ---------------------------------------------------------------------------------------------
# Protobuf wire format (only what an XSpace needs)
# ---------------------------------------------------------------------------------------------

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """Yield (field number, wire type, value or start, end) for each field in ``buf[start:end]``.

    For varints the third item is the value; for length-delimited fields it is the payload's start
    and the fourth item its end; fixed-width fields yield their start and end.
    """
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value, pos
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise ValueError("length-delimited field runs past the end")
            yield number, wire, pos, pos + length
            pos += length
        elif wire == 1:
            if pos + 8 > end:
                raise ValueError("truncated fixed64")
            yield number, wire, pos, pos + 8
            pos += 8
        elif wire == 5:
            if pos + 4 > end:
                raise ValueError("truncated fixed32")
            yield number, wire, pos, pos + 4
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _string(buf: bytes, start: int, end: int) -> str:
    return buf[start:end].decode("utf-8", errors="replace")


# XSpace: planes=1, errors=2, warnings=3, hostnames=4.
# XPlane: id=1, name=2, lines=3, event_metadata=4 (map), stat_metadata=5 (map), stats=6.
# XEventMetadata: id=1, name=2, metadata=3, display_name=4, stats=5, child_id=6.
# XStat: metadata_id=1, double=2, uint64=3, int64=4, str=5, bytes=6, ref=7.

def check_xspace(buf: bytes, origin: str) -> list[str]:
    """Validate the top level of a serialized XSpace; return its plane names.

    Walks the top-level fields only (plane payloads are skipped by length), so it is cheap even for
    a large file, and it catches a truncated file or one that is not an XSpace at all.
    """
    if not buf:
        raise InputError(f"{origin}: empty file", "capture again; the profiler wrote nothing")
    names: list[str] = []
    try:
        for number, wire, start, end in _fields(buf):
            if number not in (1, 2, 3, 4) or wire != 2:
                raise ValueError(f"unexpected field {number}/{wire} at the top level")
            if number == 1:
                name = ""
                for n2, w2, s2, e2 in _fields(buf, start, end):
                    if n2 == 2 and w2 == 2:
                        name = _string(buf, s2, e2)
                names.append(name)
    except ValueError as exc:
        raise InputError(f"{origin}: not a readable xplane ({exc})",
                         "pass an .xplane.pb written by jax.profiler/xprof; the file may be truncated "
                         "or corrupt, capture again") from exc
    if not names:
        raise InputError(f"{origin}: the trace holds no planes",
                         "capture again; the profiler recorded nothing")
    return names


def module_protos_from_xspace(buf: bytes, host: str = "") -> list[ModuleProto]:
    """The HLO modules stored in the ``/host:metadata`` plane of a serialized XSpace."""
    out: list[ModuleProto] = []
    for number, _, start, end in _fields(buf):
        if number != 1:
            continue
        plane_fields = list(_fields(buf, start, end))
        name = next((_string(buf, s, e) for n, w, s, e in plane_fields if n == 2 and w == 2), "")
        if name != "/host:metadata":
            continue
        stat_names = _plane_stat_names(buf, plane_fields)
        for n, _, s, e in plane_fields:
            if n != 4:
                continue
            for kn, _, ks, ke in _fields(buf, s, e):
                if kn != 2:
                    continue
                ev_name = ""
                proto = b""
                program_id: int | None = None
                for mn, mw, ms, me in _fields(buf, ks, ke):
                    if mn == 2 and mw == 2:
                        ev_name = _string(buf, ms, me)
                    elif mn == 5 and mw == 2:
                        stat_id, value_bytes, value_int = 0, b"", None
                        for sn, sw, ss, se in _fields(buf, ms, me):
                            if sn == 1 and sw == 0:
                                stat_id = ss
                            elif sn in (6, 5) and sw == 2:
                                value_bytes = bytes(buf[ss:se])
                            elif sn in (3, 4) and sw == 0:
                                value_int = ss
                        stat_name = stat_names.get(stat_id, "")
                        if stat_name == "Hlo Proto":
                            proto = value_bytes
                        elif stat_name == "program_id" and value_int is not None:
                            program_id = value_int
                if not proto:
                    continue
                module_name = ev_name
                m = _MODULE_WITH_ID.match(ev_name)
                if m:
                    module_name = m.group(1)
                    if program_id is None:
                        program_id = int(m.group(2))
                out.append(ModuleProto(module_name, program_id, proto, host))
    return out


def device_event_metadata(buf: bytes) -> dict[str, dict[str, tuple[str, dict[str, object]]]]:
    """Event metadata of the device planes: plane name -> event name -> (display name, stats).

    ``ProfileData`` hands out an event's name and its own stats only; on TPU the HLO op name is the
    metadata's display name and stats such as ``program_id`` live on the metadata.
    """
    out: dict[str, dict[str, tuple[str, dict[str, object]]]] = {}
    for number, _, start, end in _fields(buf):
        if number != 1:
            continue
        plane_fields = list(_fields(buf, start, end))
        name = next((_string(buf, s, e) for n, w, s, e in plane_fields if n == 2 and w == 2), "")
        if not name.startswith("/device:"):
            continue
        stat_names = _plane_stat_names(buf, plane_fields)
        events: dict[str, tuple[str, dict[str, object]]] = {}
        for n, _, s, e in plane_fields:
            if n != 4:
                continue
            for kn, _, ks, ke in _fields(buf, s, e):
                if kn != 2:
                    continue
                ev_name, display = "", ""
                stats: dict[str, object] = {}
                for mn, mw, ms, me in _fields(buf, ks, ke):
                    if mn == 2 and mw == 2:
                        ev_name = _string(buf, ms, me)
                    elif mn == 4 and mw == 2:
                        display = _string(buf, ms, me)
                    elif mn == 5 and mw == 2:
                        stat_id = 0
                        value: object = None
                        for sn, sw, ss, se in _fields(buf, ms, me):
                            if sn == 1 and sw == 0:
                                stat_id = ss
                            elif sn == 3 and sw == 0:
                                value = ss
                            elif sn == 4 and sw == 0:
                                value = ss - (1 << 64) if ss >= 1 << 63 else ss
                            elif sn == 7 and sw == 0:
                                # A ref_value names another stat metadata whose name is the value.
                                value = stat_names.get(ss, "")
                            elif sn == 5 and sw == 2:
                                value = _string(buf, ss, se)
                        if value is not None and stat_id in stat_names:
                            stats[stat_names[stat_id]] = value
                if ev_name:
                    events[ev_name] = (display, stats)
        out[name] = events
    return out


_OP_TEXT = re.compile(r"^\s*%?([\w.\-]+)\s*=\s*\S")


def split_op_text(text: str) -> tuple[str, str]:
    """``("fusion.1", text)`` for an op's HLO text (``%fusion.1 = bf16[8]{0} fusion(...)``), else
    ``(text, "")``."""
    m = _OP_TEXT.match(text)
    if m:
        return m.group(1), text.strip()
    return text, ""


def xprof_hlo_stats(paths: list[Path]) -> list[dict[str, object]]:
    """xprof's ``hlo_stats`` rows for these xplanes, each as {column id: value}.

    Runs xprof's conversion on copies in a temporary directory (it writes cache files beside its
    input). Columns are looked up by ``id`` because their order changes between releases. Empty for
    XLA:CPU traces, and when xprof cannot convert the trace.
    """
    import json
    import shutil
    import tempfile

    try:
        from xprof.convert import raw_to_tool_data
    except ImportError:  # pragma: no cover - xprof is a dependency
        return []
    with tempfile.TemporaryDirectory(prefix="hlo-doctor-xprof-") as tmp:
        copies = []
        for p in paths:
            copy = Path(tmp) / p.name
            shutil.copy(p, copy)
            copies.append(str(copy))
        try:
            data, _ = raw_to_tool_data.xspace_to_tool_data(copies, "hlo_stats", {})
        except Exception:  # noqa: BLE001 - xprof's converter raises anything on traces it dislikes
            return []
    if not data:
        return []
    try:
        doc = json.loads(data)
    except (TypeError, ValueError):
        return []
    return datatable_rows(doc)


def datatable_rows(doc: object) -> list[dict[str, object]]:
    """Rows of a Google DataTable JSON (``cols`` with ids, ``rows`` of ``{"c": [{"v": ...}]}``)."""
    if isinstance(doc, list):
        doc = doc[0] if doc else {}
    if not isinstance(doc, dict):
        return []
    ids = [str(c.get("id", "")) for c in doc.get("cols", []) if isinstance(c, dict)]
    rows = []
    for row in doc.get("rows", []) or []:
        cells = row.get("c", []) if isinstance(row, dict) else []
        rows.append({ids[i]: (cell.get("v") if isinstance(cell, dict) else None)
                     for i, cell in enumerate(cells) if i < len(ids)})
    return rows


# ---------------------------------------------------------------------------------------------
# Reading events
# ---------------------------------------------------------------------------------------------

def _host_of(path: Path) -> str:
    name = path.name
    return name[: -len(XPLANE_SUFFIX)] if name.endswith(XPLANE_SUFFIX) else path.stem


def read_trace(paths: list[Path]) -> Trace:
    """Read the xplane files of one capture (one per host).

    Raises :class:`InputError` for a file that is not an xplane, a truncated one, an empty trace and a
    trace without HLO op events.
    """
    from jax.profiler import ProfileData

    host_cols: list[str] = []
    device_cols: list[str] = []
    module_cols: list[str] = []
    pid_cols: list[int] = []
    op_cols: list[str] = []
    start_cols: list[float] = []
    dur_cols: list[float] = []
    self_cols: list[float] = []
    run_cols: list[int] = []
    expressions: dict[tuple[str, int, str], str] = {}
    steps: list[StepMark] = []
    compiles: list[CompileEvent] = []
    protos: list[ModuleProto] = []
    versions: dict[str, str] = {}
    backends: set[str] = set()
    device_kind = ""

    for path in paths:
        origin = str(path)
        try:
            buf = path.read_bytes()
        except OSError as exc:
            raise InputError(f"{origin}: cannot read ({exc.strerror})", "check the path and permissions") from exc
        check_xspace(buf, origin)
        host = _host_of(path)
        try:
            data = ProfileData.from_serialized_xspace(buf)
        except Exception as exc:  # noqa: BLE001 - the C++ reader raises RuntimeError on bad input
            raise InputError(f"{origin}: not a readable xplane ({exc})",
                             "the file may be truncated or corrupt; capture again") from exc
        try:
            protos.extend(module_protos_from_xspace(buf, host))
            device_meta = device_event_metadata(buf)
        except ValueError as exc:
            raise InputError(f"{origin}: corrupt metadata plane ({exc})", "capture again") from exc
        del buf

        device_planes = []
        host_planes = []
        for plane in data.planes:
            pname = plane.name
            if pname == "/host:metadata":
                for key, value in plane.stats:
                    if key.endswith("_version"):
                        versions[key] = str(value)
            elif pname.startswith("/device:") and not pname.startswith("/device:CUSTOM"):
                device_planes.append(plane)
            elif pname.startswith("/host:"):
                host_planes.append(plane)

        device_ops_before = len(op_cols)
        for plane in device_planes:
            kind = _device_plane_backend(plane.name)
            n_before = len(op_cols)
            _read_device_plane(plane, device_meta.get(plane.name, {}), expressions,
                               host, host_cols, device_cols, module_cols, pid_cols, op_cols,
                               start_cols, dur_cols, self_cols, run_cols)
            if len(op_cols) > n_before:
                backends.add(kind)
                for key, value in plane.stats:
                    if key in ("device_type_string", "device_kind", "chip_type") and not device_kind:
                        device_kind = str(value)
        device_had_ops = len(op_cols) > device_ops_before
        for plane in host_planes:
            _read_host_plane(plane, host, not device_had_ops, host_cols, device_cols, module_cols,
                             pid_cols, op_cols, start_cols, dur_cols, self_cols, run_cols, steps, compiles)
        if not device_had_ops and len(op_cols) > device_ops_before:
            backends.add("cpu")

    if not op_cols:
        where = ", ".join(str(p) for p in paths)
        raise InputError(f"{where}: the trace has no HLO op events",
                         "profile a window in which compiled JAX code runs (block on the results "
                         "inside the traced steps)")
    # A device trace wins over the host's own XLA:CPU events (a TPU host also runs small CPU programs).
    backend = next((b for b in ("tpu", "gpu") if b in backends), "cpu")
    if not device_kind:
        device_kind = "cpu" if backend == "cpu" else backend
    compiles.sort(key=lambda c: c.start_us)
    steps.sort(key=lambda s: (s.host, s.start_ns))
    return Trace(
        paths=tuple(str(p) for p in paths), backend=backend, device_kind=device_kind,
        ops=OpEvents(host_cols, device_cols, module_cols, pid_cols, op_cols, start_cols, dur_cols,
                     self_cols, run_cols),
        steps=tuple(steps), compile_events=tuple(compiles), module_protos=tuple(protos),
        versions=tuple(sorted(versions.items())),
        op_expressions=tuple((m, p, o, e) for (m, p, o), e in sorted(expressions.items())),
    )


def _device_plane_backend(name: str) -> str:
    lowered = name.lower()
    if "tpu" in lowered:
        return "tpu"
    if "gpu" in lowered:
        return "gpu"
    return "tpu"


def _split_module(name: str) -> tuple[str, int | None]:
    m = _MODULE_WITH_ID.match(name)
    if m:
        return m.group(1), int(m.group(2))
    return name, None


def _append_line_ops(
    events: list[tuple[float, float, str, str, int, int]], host: str, device: str,
    host_cols: list[str], device_cols: list[str], module_cols: list[str], pid_cols: list[int],
    op_cols: list[str], start_cols: list[float], dur_cols: list[float], self_cols: list[float],
    run_cols: list[int],
) -> None:
    """Append one line's op events (start, duration, module, op, program id, run id), with self times.

    Nesting is resolved per line with a stack: events on one line (thread, stream) are properly
    nested or disjoint, so a child's time is subtracted from its innermost enclosing event.
    """
    events.sort(key=lambda e: (e[0], -e[1]))
    stack: list[tuple[float, int]] = []  # (end, index into the columns)
    for start, dur, module, op, pid, run in events:
        end = start + dur
        while stack and stack[-1][0] <= start:
            stack.pop()
        idx = len(op_cols)
        if stack and end <= stack[-1][0]:
            self_cols[stack[-1][1]] -= dur
        host_cols.append(host)
        device_cols.append(device)
        module_cols.append(module)
        pid_cols.append(pid)
        op_cols.append(op)
        start_cols.append(start)
        dur_cols.append(dur)
        self_cols.append(dur)
        run_cols.append(run)
        stack.append((end, idx))


def _read_host_plane(
    plane: object, host: str, want_ops: bool, host_cols: list[str], device_cols: list[str],
    module_cols: list[str], pid_cols: list[int], op_cols: list[str], start_cols: list[float],
    dur_cols: list[float], self_cols: list[float], run_cols: list[int], steps: list[StepMark],
    compiles: list[CompileEvent],
) -> None:
    pname = plane.name  # type: ignore[attr-defined]
    for line in plane.lines:  # type: ignore[attr-defined]
        lname = line.name
        line_ops: list[tuple[float, float, str, str, int, int]] = []
        for ev in line.events:
            name = ev.name
            # Python-tracer events ("$file.py:12 func") carry no stats worth reading.
            if name.startswith(_NOISE_PREFIXES):
                continue
            stats = ev.stats if not name.startswith("$") else None
            if stats:
                sd = dict(stats)
                op = sd.get("hlo_op")
                if op is not None:
                    if want_ops:
                        pid = sd.get("program_id")
                        run = sd.get("run_id")
                        line_ops.append((ev.start_ns, ev.duration_ns, str(sd.get("hlo_module", "")),
                                         str(op), int(pid) if pid is not None else -1,
                                         int(run) if run is not None else -1))
                    continue
                if "step_num" in sd:
                    try:
                        num = int(sd["step_num"])
                    except (TypeError, ValueError):
                        num = -1
                    steps.append(StepMark(host, name, num, ev.start_ns, ev.duration_ns))
                    continue
            if _COMPILE_RE.search(name):
                module = ""
                if stats:
                    sd = dict(stats)
                    module = str(sd.get("hlo_module", sd.get("module", "")))
                compiles.append(CompileEvent(
                    name=name, start_us=ev.start_ns / 1e3, duration_us=ev.duration_ns / 1e3,
                    module=module, detail=f"{host} {pname} {lname}"))
        if line_ops:
            _append_line_ops(line_ops, host, pname, host_cols, device_cols, module_cols, pid_cols,
                             op_cols, start_cols, dur_cols, self_cols, run_cols)


def _read_device_plane(
    plane: object, metadata: dict[str, tuple[str, dict[str, object]]],
    expressions: dict[tuple[str, int, str], str], host: str, host_cols: list[str], device_cols: list[str], module_cols: list[str],
    pid_cols: list[int], op_cols: list[str], start_cols: list[float], dur_cols: list[float],
    self_cols: list[float], run_cols: list[int],
) -> None:
    pname = plane.name  # type: ignore[attr-defined]
    lines = list(plane.lines)  # type: ignore[attr-defined]
    xla_ops = [ln for ln in lines if ln.name == "XLA Ops"]
    module_spans: list[tuple[float, float, str, int]] = []
    for ln in lines:
        if ln.name == "XLA Modules":
            for ev in ln.events:
                module, pid = _split_module(ev.name)
                sd = dict(ev.stats) if ev.stats else {}
                if sd.get("program_id") is not None:
                    pid = int(sd["program_id"])
                module_spans.append((ev.start_ns, ev.start_ns + ev.duration_ns, module,
                                     pid if pid is not None else -1))
    module_spans.sort()
    span_starts = [s[0] for s in module_spans]

    def enclosing(start: float) -> tuple[str, int, int]:
        i = bisect.bisect_right(span_starts, start) - 1
        if i >= 0 and module_spans[i][1] >= start:
            return module_spans[i][2], module_spans[i][3], i
        return "", -1, -1

    # With an "XLA Ops" line, every op is there once; stream lines would repeat them as kernels.
    for ln in (xla_ops or lines):
        if ln.name in ("XLA Modules", "Steps", "Framework Ops", "Framework Name Scope", "Source code"):
            continue
        line_ops: list[tuple[float, float, str, str, int, int]] = []
        for ev in ln.events:
            name = ev.name
            display, meta_stats = metadata.get(name, ("", {}))
            own = dict(ev.stats) if ev.stats else {}
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
            pid = int(pid_value) if pid_value is not None else -1
            run_value = sd.get("run_id")
            run = int(run_value) if run_value is not None else -1
            if not module or pid < 0 or run < 0:
                enc_module, enc_pid, enc_index = enclosing(ev.start_ns)
                run = run if run >= 0 else enc_index
                module = module or enc_module
                pid = pid if pid >= 0 else enc_pid
            module, suffix_pid = _split_module(module)
            if pid < 0 and suffix_pid is not None:
                pid = suffix_pid
            if text:
                expressions.setdefault((module, pid, op), text)
            line_ops.append((ev.start_ns, ev.duration_ns, module, op, pid, run))
        if line_ops:
            _append_line_ops(line_ops, host, pname, host_cols, device_cols, module_cols, pid_cols,
                             op_cols, start_cols, dur_cols, self_cols, run_cols)


def _plane_stat_names(buf: bytes, plane_fields: list[tuple[int, int, int, int]]) -> dict[int, str]:
    """An XPlane's stat metadata (field 5: map<int64, XStatMetadata>) as id -> name."""
    stat_names: dict[int, str] = {}
    for n, _, s, e in plane_fields:
        if n != 5:
            continue
        for kn, _, ks, ke in _fields(buf, s, e):
            if kn == 2:
                sid, sname = 0, ""
                for mn, mw, ms, me in _fields(buf, ks, ke):
                    if mn == 1 and mw == 0:
                        sid = ms
                    elif mn == 2 and mw == 2:
                        sname = _string(buf, ms, me)
                stat_names[sid] = sname
    return stat_names
