"""The one reader of an XSpace (``<host>.xplane.pb``): planes -> lines -> events, and their stats.

Parsing is protobuf's (the generated :mod:`hlo_doctor.trace.xplane_pb2`, from tsl's
``xplane.proto``): fields are read by name. Stats are stored as (stat metadata id, value); the
helpers here turn them into (stat name, value) with a ``ref_value`` resolved to the name it points
at, as every reader of xplanes does.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace import xplane_pb2
from hlo_doctor.trace.model import ModuleProto

# The generated module has no type information; its messages are handled as Any.
XSpace = Any
XPlane = Any
XStat = Any


def _message_classes() -> tuple[Any, ...]:
    """XSpace, XPlane, and an XSpace whose planes stay serialized, from the generated schema.

    - The two maps of an XPlane are read as their repeated entries: on the wire a
      ``map<int64, M>`` is a repeated ``{key, value}`` message; a protobuf map forgets the order of
      the file, the repeated form keeps it (modules are listed in the order the profiler wrote them).
    - ``XSpacePlanes`` declares field 1 (``planes``) as bytes: the same wire data, split into one
      serialized plane each, so that a large trace is parsed one plane at a time (a parsed plane
      takes several times its size in memory).
    """
    fdp = descriptor_pb2.FileDescriptorProto()
    xplane_pb2.DESCRIPTOR.CopyToProto(fdp)
    for message in fdp.message_type:
        for nested in message.nested_type:
            if nested.options.map_entry:
                nested.ClearField("options")
    field = descriptor_pb2.FieldDescriptorProto
    shallow = fdp.message_type.add(name="XSpacePlanes")
    shallow.field.add(name="planes", number=1, label=field.LABEL_REPEATED, type=field.TYPE_BYTES)
    # An XPlane's name alone (field 2), to order the planes before parsing them.
    head = fdp.message_type.add(name="XPlaneName")
    head.field.add(name="name", number=2, label=field.LABEL_OPTIONAL, type=field.TYPE_STRING)
    # The streamed reader (:mod:`.stream`): an XPlane whose lines stay serialized, and an XLine whose
    # events do (the same wire data; a line is then parsed a chunk of events at a time).
    for source, copy, number in (("XPlane", "XPlaneHead", 3), ("XLine", "XLineSplit", 4)):
        message = fdp.message_type.add()
        message.CopyFrom(next(m for m in fdp.message_type if m.name == source))
        message.name = copy
        del message.nested_type[:]
        raw = next(f for f in message.field if f.number == number)
        raw.name, raw.type = "raw_" + raw.name, field.TYPE_BYTES
        raw.ClearField("type_name")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.{name}"))
                 for name in ("XSpace", "XPlane", "XSpacePlanes", "XPlaneName", "XPlaneHead", "XLineSplit",
                              "XLine"))  # type: ignore[return-value]


_XSPACE, _XPLANE, _XSPACE_PLANES, _XPLANE_NAME, XPLANE_HEAD, XLINE_SPLIT, XLINE = _message_classes()
UINT64_LIMIT = 1 << 64

METADATA_PLANE = "/host:metadata"
MODULE_WITH_ID = re.compile(r"^(.*)\((\d+)\)$")


def parse_xspace(buf: bytes, origin: str) -> XSpace:
    """Parse a serialized XSpace; :class:`InputError` for an empty, corrupt or plane-less file."""
    if not buf:
        raise InputError(f"{origin}: empty file", "capture again; the profiler wrote nothing")
    try:
        space = _XSPACE.FromString(buf)
    except (DecodeError, ValueError) as exc:
        raise InputError(f"{origin}: not a readable xplane (truncated or corrupt: {exc})",
                         "pass an .xplane.pb written by jax.profiler/xprof; the file may be truncated "
                         "or corrupt, capture again") from exc
    if not space.planes:
        raise InputError(f"{origin}: the trace holds no planes",
                         "capture again; the profiler recorded nothing")
    return space


def split_planes(buf: bytes, origin: str) -> list[bytes]:
    """The serialized planes of a serialized XSpace; :class:`InputError` as :func:`parse_xspace`."""
    if not buf:
        raise InputError(f"{origin}: empty file", "capture again; the profiler wrote nothing")
    try:
        planes = list(_XSPACE_PLANES.FromString(buf).planes)
    except (DecodeError, ValueError) as exc:
        raise InputError(f"{origin}: not a readable xplane (truncated or corrupt: {exc})",
                         "pass an .xplane.pb written by jax.profiler/xprof; the file may be truncated "
                         "or corrupt, capture again") from exc
    if not planes:
        raise InputError(f"{origin}: the trace holds no planes",
                         "capture again; the profiler recorded nothing")
    return planes


def plane_name(data: bytes, origin: str) -> str:
    """The name of one serialized XPlane, without parsing the rest of it."""
    try:
        return str(_XPLANE_NAME.FromString(data).name)
    except (DecodeError, ValueError) as exc:
        raise InputError(f"{origin}: not a readable xplane (truncated or corrupt plane: {exc})",
                         "the file may be truncated or corrupt; capture again") from exc


def parse_plane(data: bytes, origin: str) -> XPlane:
    """Parse one serialized XPlane (from :func:`split_planes`)."""
    try:
        return _XPLANE.FromString(data)
    except (DecodeError, ValueError) as exc:
        raise InputError(f"{origin}: not a readable xplane (truncated or corrupt plane: {exc})",
                         "the file may be truncated or corrupt; capture again") from exc


def program_id_of(value: object) -> int | None:
    """A program id (uint64) from a stat value; None when the value is not one.

    libtpu writes ids above 2**63; one written as an int64 arrives negative and is read back as the
    uint64 it encodes. All bits set (int64 -1) means "no id", as does anything but an integer
    (a double, bytes, text that is not a number) or a number beyond 64 bits.
    """
    if isinstance(value, str):
        value = int(value) if value.strip().isdigit() else None
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if value < 0:
        value += UINT64_LIMIT
    if not 0 <= value < UINT64_LIMIT - 1:
        return None
    return value


def check_xspace(buf: bytes, origin: str) -> list[str]:
    """Validate a serialized XSpace; return its plane names (see :func:`parse_xspace`)."""
    return [plane.name for plane in parse_xspace(buf, origin).planes]


def stat_names(plane: XPlane) -> dict[int, str]:
    """An XPlane's stat metadata as id -> name."""
    return {entry.key: entry.value.name for entry in plane.stat_metadata}


def event_names(plane: XPlane) -> dict[int, str]:
    """An XPlane's event metadata as id -> name."""
    return {entry.key: entry.value.name for entry in plane.event_metadata}


def stat_value(stat: XStat, names: dict[int, str]) -> object:
    """The value of one XStat: a ``ref_value`` is the name of the stat metadata it refers to;
    ``bytes_value`` is decoded as UTF-8 (its users read names and versions from it)."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    if kind == "bytes_value":
        return stat.bytes_value.decode("utf-8", errors="replace")
    return getattr(stat, kind)


def stat_items(stats: Any, names: dict[int, str]) -> list[tuple[str, object]]:
    """Repeated XStat as (name, value) pairs, in order; stats whose metadata is missing are skipped."""
    out: list[tuple[str, object]] = []
    for stat in stats:
        name = names.get(stat.metadata_id)
        if name is not None:
            out.append((name, stat_value(stat, names)))
    return out


def module_protos_from_xspace(data: bytes | XSpace, host: str = "") -> list[ModuleProto]:
    """The HLO modules stored in the ``/host:metadata`` plane (serialized XSpace or parsed one)."""
    space = _XSPACE.FromString(data) if isinstance(data, (bytes, bytearray)) else data
    out: list[ModuleProto] = []
    for plane in space.planes:
        if plane.name == METADATA_PLANE:
            out.extend(m for m in metadata_plane_modules(plane, host) if m.hlo_proto)
    return out


def metadata_plane_modules(plane: XPlane, host: str = "", path: str = "") -> list[ModuleProto]:
    """Every module the ``/host:metadata`` plane names, with its HLO when it has one.

    One event metadata per module, named ``module(program_id)``, whose ``Hlo Proto`` stat holds a
    serialized ``HloProto``; a ``program_id`` stat, when present, gives the id (jax 0.11 numbers
    the metadata 1, 2, ... and puts the program id in that stat).
    """
    out: list[ModuleProto] = []
    names = stat_names(plane)
    for entry in plane.event_metadata:
        meta = entry.value
        proto = b""
        program_id: int | None = None
        for stat in meta.stats:
            stat_name = names.get(stat.metadata_id, "")
            kind = stat.WhichOneof("value")
            if stat_name == "Hlo Proto" and kind in ("bytes_value", "str_value"):
                value = getattr(stat, kind)
                proto = value if isinstance(value, bytes) else value.encode()
            elif stat_name == "program_id" and kind in ("uint64_value", "int64_value"):
                program_id = program_id_of(getattr(stat, kind))
        module_name = meta.name
        m = MODULE_WITH_ID.match(meta.name)
        if m:
            module_name = m.group(1)
            if program_id is None:
                program_id = program_id_of(int(m.group(2)))
        out.append(ModuleProto(module_name, program_id, proto, host, path))
    return out
