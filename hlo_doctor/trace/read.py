"""Finding a capture's xplane files and reading them into a :class:`Trace`."""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace.conventions import (
    OpColumns,
    device_plane_backend,
    read_device_plane,
    read_host_plane,
)
from hlo_doctor.trace.model import CompileEvent, ModuleProto, OpEvents, StepMark, Trace
from hlo_doctor.trace.xspace import (
    METADATA_PLANE,
    XPlane,
    device_event_metadata,
    module_protos_from_xspace,
    parse_xspace,
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


def read_trace(paths: list[Path]) -> Trace:
    """Read the xplane files of one capture (one per host).

    Raises :class:`InputError` for a file that is not an xplane, a truncated one, an empty trace and a
    trace without HLO op events.
    """
    cols = OpColumns()
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
        space = parse_xspace(buf, origin)
        del buf
        host = _host_of(path)
        protos.extend(module_protos_from_xspace(space, host))
        device_meta = device_event_metadata(space)

        device_planes = []
        host_planes = []
        for plane in space.planes:
            pname = plane.name
            if pname == METADATA_PLANE:
                for key, value in _plane_stats(plane):
                    if key.endswith("_version"):
                        versions[key] = str(value)
            elif pname.startswith("/device:") and not pname.startswith("/device:CUSTOM"):
                device_planes.append(plane)
            elif pname.startswith("/host:"):
                host_planes.append(plane)

        device_ops_before = len(cols)
        for plane in device_planes:
            n_before = len(cols)
            read_device_plane(plane, device_meta.get(plane.name, {}), expressions, host, cols)
            if len(cols) > n_before:
                backends.add(device_plane_backend(plane.name))
                for key, value in _plane_stats(plane):
                    if key in ("device_type_string", "device_kind", "chip_type") and not device_kind:
                        device_kind = str(value)
        device_had_ops = len(cols) > device_ops_before
        for plane in host_planes:
            read_host_plane(plane, host, not device_had_ops, cols, steps, compiles)
        if not device_had_ops and len(cols) > device_ops_before:
            backends.add("cpu")
        del space

    if not len(cols):
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
        ops=OpEvents(cols.host, cols.device, cols.module, cols.program_id, cols.op, cols.start_ns,
                     cols.duration_ns, cols.self_ns, cols.run_id),
        steps=tuple(steps), compile_events=tuple(compiles), module_protos=tuple(protos),
        versions=tuple(sorted(versions.items())),
        op_expressions=tuple((m, p, o, e) for (m, p, o), e in sorted(expressions.items())),
    )
