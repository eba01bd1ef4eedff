"""HLO text from serialized ``HloProto`` / ``HloModuleProto`` bytes (xprof's ``.hlo_proto.pb`` files)."""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from hlo_doctor.core.errors import InputError


def module_text_from_proto(data: bytes, *, origin: str = "") -> str:
    """HLO text (with metadata and stack frames) from serialized ``HloProto`` or ``HloModuleProto`` bytes.

    xprof writes ``<module>(<program_id>).hlo_proto.pb`` files holding an ``HloProto`` whose field 1
    is the ``HloModuleProto``; a bare ``HloModuleProto`` (field 1 is its name, a string) is accepted too.
    """
    # jaxlib's own xla_client (XLA's HLO printer, ~0.25 s to import), not jax's: reading a capture
    # never imports jax (~1.5 s more), whose lib module re-exports this one. jax, imported first,
    # would set XLA's C++ log level to warnings; loaded before it (a what-if run imports jax later),
    # jaxlib would print its INFO lines (the CPU client's device count) on stderr.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from jaxlib import xla_client

    module_bytes = _hlo_module_field(data)
    for candidate in (module_bytes, data):
        if candidate is None:
            continue
        try:
            return str(xla_client.XlaComputation(candidate).get_hlo_module().to_string())
        except Exception:  # noqa: BLE001 - try the other reading, then report
            continue
    raise InputError(f"{origin or 'HLO proto'}: not a serialized HLO module",
                     "pass an .hlo_proto.pb written by xprof or a serialized HloModuleProto")


@cache
def _messages() -> tuple[Any, Any]:
    """Two message classes for the only fields read here, built once in a private descriptor pool.

    jaxlib ships no Python ``HloProto`` message, so this declares the two fields that tell the
    wrappings apart: ``HloProto.hlo_module`` (field 1, kept as bytes so the module's exact bytes go
    to XLA) and ``HloModuleProto.name`` (field 1, a string). Every other field stays unknown, which
    protobuf skips.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    bytes_field = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    file = descriptor_pb2.FileDescriptorProto(name="hlo_doctor/hlo/hlo_head.proto",
                                              package="hlo_doctor.hlo", syntax="proto2")
    for message, field in (("HloProtoHead", "hlo_module"), ("HloModuleHead", "name")):
        file.message_type.add(name=message).field.add(
            name=field, number=1, type=bytes_field, label=optional)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("hlo_doctor.hlo.HloProtoHead")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("hlo_doctor.hlo.HloModuleHead")))


def _hlo_module_field(data: bytes) -> bytes | None:
    """Field 1 of an ``HloProto`` when it holds a module (a message with a name), else None."""
    from google.protobuf.message import DecodeError

    proto_head, module_head = _messages()
    try:
        outer = proto_head.FromString(data)
        if not outer.HasField("hlo_module"):
            return None
        inner: bytes = outer.hlo_module
        # An HloModuleProto's field 1 is its name (a string); an HloProto's field 1 is a message whose
        # own field 1 is again the module name. Reading the string as a message fails or names nothing.
        return inner if module_head.FromString(inner).HasField("name") else None
    except DecodeError:
        return None
