"""Finding a capture's xplane files and reading them into a :class:`Trace`.

Each host's file is read on its own (:func:`read_host`: op events into columns, the rest into a
:class:`HostRead`); :func:`combine_hosts` makes one trace of them. Reading all hosts in one process
(:func:`read_trace`) and reading each elsewhere and combining what they found
(:mod:`hlo_doctor.hosts`) share both steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import InputError, NoOpsError
from hlo_doctor.core.handoff import quick_handoffs
from hlo_doctor.trace.columns import OpColumns, return_freed_memory, trim_freed_memory, unique_values
from hlo_doctor.trace.compiles import annotate_compiles
from hlo_doctor.trace.conventions import device_plane_backend, read_host_plane
from hlo_doctor.trace.cwire import COMPILED
from hlo_doctor.trace.device import DevicePlaneReader
from hlo_doctor.trace.locate import XPLANE_SUFFIX, locate_capture
from hlo_doctor.trace.model import CompileEvent, ModuleProto, OpEvents, StepMark, Trace
from hlo_doctor.trace.peaks import DevicePeaks, peaks_from_plane
from hlo_doctor.trace.stream import PlaneRef, XSpaceFile
from hlo_doctor.trace.xspace import METADATA_PLANE, XPlane, metadata_plane_modules, stat_items, stat_names


def find_xplanes(path: Path) -> list[Path]:
    """The xplane files of one capture: ``path`` itself, or the host files of the one capture in the
    folder (:func:`~hlo_doctor.trace.locate.locate_capture`: a doctor or verify folder's baseline; a
    folder with several captures and no baseline is refused, naming them).
    """
    if path.is_file():
        return [path]
    where = locate_capture(path)
    if where.kind not in ("run", "xplane"):
        raise InputError(f"{path}: no .xplane.pb inside (it holds {_KIND_WORDS.get(where.kind, where.kind)})",
                         "pass a run directory from 'hlo-doctor profile', an xprof/TensorBoard log "
                         "directory or an .xplane.pb file")
    return list(where.files)


_KIND_WORDS = {"export": "an op-stats export", "hlo": "HLO text only", "trace-json": "a trace JSON"}


def host_of(path: Path | str) -> str:
    """The host a file is named after (``tpu-host-0`` for ``tpu-host-0.xplane.pb``)."""
    name = Path(path).name
    return name[: -len(XPLANE_SUFFIX)] if name.endswith(XPLANE_SUFFIX) else Path(path).stem


def _plane_stats(plane: XPlane) -> list[tuple[str, object]]:
    return stat_items(plane.stats, stat_names(plane))


_DEVICE_KIND_STATS = ("gpu_device_name", "device_type_string", "device_kind", "chip_type")


def _is_device_plane(name: str) -> bool:
    return name.startswith("/device:") and not name.startswith("/device:CUSTOM")


@dataclass(slots=True)
class HostRead:
    """What one host's file holds besides its op events (those go into :class:`OpColumns`)."""

    path: str
    host: str
    ops: int = 0
    """Op events read."""
    program_ids: set[int] = field(default_factory=set)
    """Program ids of those events (-1: unknown)."""
    backends: set[str] = field(default_factory=set)
    device_kind: str = ""
    """As the first device plane with op events states it; empty when none does."""
    devices: set[tuple[str, str]] = field(default_factory=set)
    named_modules: dict[int, str] = field(default_factory=dict)
    protos: list[ModuleProto] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    expressions: dict[tuple[str, int, str], str] = field(default_factory=dict)
    costs: dict[tuple[str, int, str], tuple[float | None, float | None]] = field(default_factory=dict)
    peaks: DevicePeaks | None = None
    steps: list[StepMark] = field(default_factory=list)
    device_steps: list[StepMark] = field(default_factory=list)
    compiles: list[CompileEvent] = field(default_factory=list)
    compiles_annotated: bool = False
    """True once :func:`annotate_compiles` ran on ``compiles`` with this host's op events."""


def read_host(source: Path | bytes, cols: OpColumns, origin: str = "") -> HostRead:
    """Read one host's xplane (a path, or its bytes) into ``cols`` and a :class:`HostRead`.

    Planes are read one at a time and their lines a chunk of events at a time
    (:mod:`hlo_doctor.trace.stream`): device planes first, as their op events decide whether the
    host's own XLA:CPU events count. A file without op events is no error here (another host may
    have them). Raises :class:`InputError` for a file that cannot be read, is not an xplane or is
    truncated.
    """
    if COMPILED:  # (the numpy decoder's passes allocate and free too often for it)
        return_freed_memory()
    origin = origin or str(source)
    out = HostRead(path=origin, host=host_of(origin))
    host = out.host
    start, pid_chunks = len(cols), len(cols.chunks[3])
    with XSpaceFile(source, origin) as space:
        for ref in space.planes:
            if ref.name != METADATA_PLANE:
                continue
            plane = space.plane(ref)
            for module in metadata_plane_modules(plane, host, origin):
                if module.program_id is not None:
                    out.named_modules.setdefault(module.program_id, module.name)
                if module.hlo_proto:
                    out.protos.append(module)
            for key, value in _plane_stats(plane):
                if key.endswith("_version"):
                    out.versions[key] = str(value)

        idle: list[str] = []
        device_refs = [ref for ref in space.planes if _is_device_plane(ref.name)]

        def prepare(ref: PlaneRef) -> tuple[PlaneRef, Any, DevicePlaneReader]:
            plane = space.plane(ref)
            reader = DevicePlaneReader(plane, host, out.named_modules, cols, out.expressions, out.warnings)
            reader.prefetch(background.submit)
            return ref, plane, reader

        # The next device plane's op events are decoded in the background while this one is read
        # into the columns (one plane ahead: the peak holds one more plane's events at most).
        with quick_handoffs(), ThreadPoolExecutor(1, thread_name_prefix="hlo-doctor-decode") as background:
            ahead = [prepare(device_refs[0])] if device_refs else []
            for k in range(len(device_refs)):
                ref, plane, reader = ahead.pop()
                if k + 1 < len(device_refs):
                    ahead.append(prepare(device_refs[k + 1]))
                if reader.read(out.device_steps):
                    out.backends.add(device_plane_backend(ref.name))
                    out.devices.add((host, ref.name))
                    plane_stats = _plane_stats(plane)
                    for key, value in plane_stats:
                        if key in _DEVICE_KIND_STATS and not out.device_kind:
                            out.device_kind = str(value)
                    out.peaks = out.peaks or peaks_from_plane(plane_stats)
                    for op_key, cost in reader.costs.items():
                        out.costs.setdefault(op_key, cost)
                else:
                    idle.append(ref.name)
        device_had_ops = len(cols) > start
        if device_had_ops and idle:
            out.warnings.append(f"{host}: no op events on {', '.join(idle)} (no XLA Ops line, no hlo_op stats)")
        for ref in space.planes:
            if ref.name.startswith("/host:") and ref.name != METADATA_PLANE:
                n_before = len(cols)
                read_host_plane(space.plane(ref), host, not device_had_ops, cols, out.steps, out.compiles)
                if len(cols) > n_before:
                    out.devices.add((host, ""))
    if not device_had_ops and len(cols) > start:
        out.backends.add("cpu")
    out.ops = len(cols) - start
    values = cols.program_ids.values
    for chunk in cols.chunks[3][pid_chunks:]:
        out.program_ids.update(values[c] for c in unique_values(chunk).tolist())
    trim_freed_memory()
    return out


def read_module_protos(source: Path | bytes, origin: str = "") -> list[ModuleProto]:
    """The HLO modules of one host's xplane (its ``/host:metadata`` plane alone is read).

    Raises :class:`InputError` as :func:`read_host` does.
    """
    origin = origin or str(source)
    with XSpaceFile(source, origin) as space:
        return [m for ref in space.planes if ref.name == METADATA_PLANE
                for m in metadata_plane_modules(space.plane(ref), host_of(origin), origin) if m.hlo_proto]


_OBSERVERS: list[Callable[[list[Path], Trace], None]] = []


@contextmanager
def observing_traces(observer: Callable[[list[Path], Trace], None]) -> Iterator[None]:
    """Within the block, each capture :func:`read_trace` reads is also handed to ``observer`` (the
    files, the trace): a stage that needs the same events again later keeps what it needs of them
    instead of reading the files a second time (``lint.trace_capture``)."""
    _OBSERVERS.append(observer)
    try:
        yield
    finally:
        _OBSERVERS.remove(observer)


def read_trace(paths: list[Path]) -> Trace:
    """Read the xplane files of one capture (one per host) in this process.

    Raises :class:`InputError` for a file that is not an xplane, a truncated one, an empty trace
    and a trace without HLO op events.
    """
    cols = OpColumns()
    reads = [read_host(path, cols) for path in paths]
    trace = combine_hosts(reads, cols.finish())
    observed(list(paths), trace)
    return trace


def observed(paths: list[Path], trace: Trace) -> None:
    """Hand a capture just read (its files, its trace) to the observers of :func:`observing_traces`,
    if any."""
    for observer in tuple(_OBSERVERS):
        observer(paths, trace)


def observed_by_any() -> bool:
    """Whether a block of :func:`observing_traces` is open."""
    return bool(_OBSERVERS)


def combine_hosts(reads: list[HostRead], ops: OpEvents) -> Trace:
    """One :class:`Trace` of the hosts' reads (in the order of their files) and their op events.

    ``ops`` may be empty where the events were reduced elsewhere (:mod:`hlo_doctor.hosts`): then
    each read's compile events must already be annotated with its own host's events.
    """
    if not sum(r.ops for r in reads):
        where = ", ".join(r.path for r in reads)
        raise NoOpsError(f"{where}: the trace has no HLO op events",
                         "profile a window in which compiled JAX code runs (block on the results "
                         "inside the traced steps)")
    named: dict[int, str] = {}
    warnings: list[str] = []
    versions: dict[str, str] = {}
    expressions: dict[tuple[str, int, str], str] = {}
    costs: dict[tuple[str, int, str], tuple[float | None, float | None]] = {}
    for r in reads:
        named.update(r.named_modules)
        warnings.extend(r.warnings)
        versions.update(r.versions)
        for key, text in r.expressions.items():
            expressions.setdefault(key, text)
        for key, cost in r.costs.items():
            costs.setdefault(key, cost)
    if named:
        unnamed = sorted(p for p in set().union(*(r.program_ids for r in reads)) if p >= 0 and p not in named)
        if unnamed:
            warnings.append("program ids in no module of the metadata plane: "
                            + ", ".join(str(p) for p in unnamed[:5]) + ("..." if len(unnamed) > 5 else ""))
    backends = set().union(*(r.backends for r in reads))
    # A device trace wins over the host's own XLA:CPU events (a TPU host also runs small CPU programs).
    backend = next((b for b in ("tpu", "gpu") if b in backends), "cpu")
    device_kind = next((r.device_kind for r in reads if r.device_kind), "") or (
        "cpu" if backend == "cpu" else backend)
    steps = sorted((s for r in reads for s in r.steps), key=lambda s: (s.host, s.start_ns))
    device_steps = sorted((s for r in reads for s in r.device_steps), key=lambda s: (s.host, s.device, s.start_ns))
    compiles = sorted((c for r in reads for c in r.compiles), key=lambda c: c.start_us)
    if not all(r.compiles_annotated for r in reads):
        compiles = list(annotate_compiles(compiles, steps, ops))
    return Trace(
        paths=tuple(r.path for r in reads), backend=backend, device_kind=device_kind, ops=ops,
        steps=tuple(steps), compile_events=tuple(compiles), module_protos=tuple(p for r in reads for p in r.protos),
        versions=tuple(sorted(versions.items())),
        op_expressions=tuple((m, p, o, e) for (m, p, o), e in sorted(expressions.items())),
        device_steps=tuple(device_steps), num_devices=len(set().union(*(r.devices for r in reads))),
        warnings=tuple(warnings),
        op_costs=tuple((m, p, o, f, b) for (m, p, o), (f, b) in sorted(costs.items())),
        peaks=next((r.peaks for r in reads if r.peaks is not None), None),
    )
