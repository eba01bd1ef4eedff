"""Finding a capture's xplane files and reading them into a :class:`Trace`."""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace.columns import OpColumns
from hlo_doctor.trace.compiles import annotate_compiles
from hlo_doctor.trace.conventions import device_plane_backend, read_host_plane
from hlo_doctor.trace.device import DevicePlaneReader
from hlo_doctor.trace.model import CompileEvent, ModuleProto, StepMark, Trace
from hlo_doctor.trace.peaks import DevicePeaks, peaks_from_plane
from hlo_doctor.trace.xspace import (
    METADATA_PLANE,
    XPlane,
    metadata_plane_modules,
    parse_plane,
    plane_name,
    split_planes,
    stat_items,
    stat_names,
)

XPLANE_SUFFIX = ".xplane.pb"


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


def _host_of(path: Path) -> str:
    name = path.name
    return name[: -len(XPLANE_SUFFIX)] if name.endswith(XPLANE_SUFFIX) else path.stem


def _plane_stats(plane: XPlane) -> list[tuple[str, object]]:
    return stat_items(plane.stats, stat_names(plane))


_DEVICE_KIND_STATS = ("gpu_device_name", "device_type_string", "device_kind", "chip_type")


def _is_device_plane(name: str) -> bool:
    return name.startswith("/device:") and not name.startswith("/device:CUSTOM")


def read_trace(paths: list[Path]) -> Trace:
    """Read the xplane files of one capture (one per host).

    Planes are parsed one at a time (device planes first: their op events decide whether the host's
    own XLA:CPU events count). Raises :class:`InputError` for a file that is not an xplane, a
    truncated one, an empty trace and a trace without HLO op events.
    """
    cols = OpColumns()
    expressions: dict[tuple[str, int, str], str] = {}
    steps: list[StepMark] = []
    device_steps: list[StepMark] = []
    compiles: list[CompileEvent] = []
    protos: list[ModuleProto] = []
    versions: dict[str, str] = {}
    backends: set[str] = set()
    warnings: list[str] = []
    device_kind = ""
    devices: set[tuple[str, str]] = set()
    named_modules: dict[int, str] = {}
    costs: dict[tuple[str, int, str], tuple[float | None, float | None]] = {}
    peaks: DevicePeaks | None = None

    for path in paths:
        origin = str(path)
        try:
            buf = path.read_bytes()
        except OSError as exc:
            raise InputError(f"{origin}: cannot read ({exc.strerror})", "check the path and permissions") from exc
        planes = split_planes(buf, origin)
        del buf
        host = _host_of(path)
        names = [plane_name(data, origin) for data in planes]
        module_names: dict[int, str] = {}
        for i, name in enumerate(names):
            if name == METADATA_PLANE:
                plane = parse_plane(planes[i], origin)
                for module in metadata_plane_modules(plane, host):
                    if module.program_id is not None:
                        module_names.setdefault(module.program_id, module.name)
                    if module.hlo_proto:
                        protos.append(module)
                for key, value in _plane_stats(plane):
                    if key.endswith("_version"):
                        versions[key] = str(value)
        named_modules.update(module_names)

        device_ops_before = len(cols)
        idle: list[str] = []
        for i, name in enumerate(names):
            if not _is_device_plane(name):
                continue
            plane = parse_plane(planes[i], origin)
            planes[i] = b""  # read once: free its bytes
            reader = DevicePlaneReader(plane, host, module_names, cols, expressions, warnings)
            added = reader.read(device_steps)
            if added:
                backends.add(device_plane_backend(name))
                devices.add((host, name))
                plane_stats = _plane_stats(plane)
                for key, value in plane_stats:
                    if key in _DEVICE_KIND_STATS and not device_kind:
                        device_kind = str(value)
                peaks = peaks or peaks_from_plane(plane_stats)
                for op_key, cost in reader.costs.items():
                    costs.setdefault(op_key, cost)
            else:
                idle.append(name)
        device_had_ops = len(cols) > device_ops_before
        if device_had_ops and idle:
            warnings.append(f"{host}: no op events on {', '.join(idle)} (no XLA Ops line, no hlo_op stats)")
        for i, name in enumerate(names):
            if name.startswith("/host:") and name != METADATA_PLANE:
                n_before = len(cols)
                read_host_plane(parse_plane(planes[i], origin), host, not device_had_ops, cols, steps, compiles)
                if len(cols) > n_before:
                    devices.add((host, ""))
        if not device_had_ops and len(cols) > device_ops_before:
            backends.add("cpu")

    if not len(cols):
        where = ", ".join(str(p) for p in paths)
        raise InputError(f"{where}: the trace has no HLO op events",
                         "profile a window in which compiled JAX code runs (block on the results "
                         "inside the traced steps)")
    if named_modules:
        unnamed = sorted(p for p in cols.program_ids.values if p >= 0 and p not in named_modules)
        if unnamed:
            warnings.append("program ids in no module of the metadata plane: "
                            + ", ".join(str(p) for p in unnamed[:5]) + ("..." if len(unnamed) > 5 else ""))
    # A device trace wins over the host's own XLA:CPU events (a TPU host also runs small CPU programs).
    backend = next((b for b in ("tpu", "gpu") if b in backends), "cpu")
    if not device_kind:
        device_kind = "cpu" if backend == "cpu" else backend
    compiles.sort(key=lambda c: c.start_us)
    steps.sort(key=lambda s: (s.host, s.start_ns))
    device_steps.sort(key=lambda s: (s.host, s.device, s.start_ns))
    ops = cols.finish()
    return Trace(
        paths=tuple(str(p) for p in paths), backend=backend, device_kind=device_kind,
        ops=ops,
        steps=tuple(steps), compile_events=annotate_compiles(compiles, steps, ops), module_protos=tuple(protos),
        versions=tuple(sorted(versions.items())),
        op_expressions=tuple((m, p, o, e) for (m, p, o), e in sorted(expressions.items())),
        device_steps=tuple(device_steps), num_devices=len(devices), warnings=tuple(warnings),
        op_costs=tuple((m, p, o, f, b) for (m, p, o), (f, b) in sorted(costs.items())), peaks=peaks,
    )
