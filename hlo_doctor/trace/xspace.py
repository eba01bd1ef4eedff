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


def _xspace_class() -> Any:
    """The XSpace message class, with the two maps of an XPlane read as their repeated entries.

    On the wire a ``map<int64, M>`` is a repeated ``{key, value}`` message; a protobuf map forgets
    the order of the file, the repeated form keeps it (the modules of a trace are listed in the order
    the profiler wrote them). Same schema, same field names, one flag off.
    """
    fdp = descriptor_pb2.FileDescriptorProto()
    xplane_pb2.DESCRIPTOR.CopyToProto(fdp)
    for message in fdp.message_type:
        for nested in message.nested_type:
            if nested.options.map_entry:
                nested.ClearField("options")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.XSpace"))


_XSPACE: Any = _xspace_class()

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
    """The HLO modules stored in the ``/host:metadata`` plane (serialized XSpace or parsed one).

    One event metadata per module, named ``module(program_id)``, whose ``Hlo Proto`` stat holds a
    serialized ``HloProto``; a ``program_id`` stat, when present, gives the id.
    """
    space = _XSPACE.FromString(data) if isinstance(data, (bytes, bytearray)) else data
    out: list[ModuleProto] = []
    for plane in space.planes:
        if plane.name != METADATA_PLANE:
            continue
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
                    program_id = getattr(stat, kind)
            if not proto:
                continue
            module_name = meta.name
            m = MODULE_WITH_ID.match(meta.name)
            if m:
                module_name = m.group(1)
                if program_id is None:
                    program_id = int(m.group(2))
            out.append(ModuleProto(module_name, program_id, proto, host))
    return out


def device_event_metadata(space: XSpace) -> dict[str, dict[str, tuple[str, dict[str, object]]]]:
    """Event metadata of the device planes: plane name -> event name -> (display name, stats).

    On TPU the HLO op name is the metadata's display name and stats such as ``program_id`` live on
    the metadata, not on the event.
    """
    out: dict[str, dict[str, tuple[str, dict[str, object]]]] = {}
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        names = stat_names(plane)
        events: dict[str, tuple[str, dict[str, object]]] = {}
        for entry in plane.event_metadata:
            meta = entry.value
            if meta.name:
                events[meta.name] = (meta.display_name, dict(stat_items(meta.stats, names)))
        out[plane.name] = events
    return out
