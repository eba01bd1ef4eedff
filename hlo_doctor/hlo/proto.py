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
        # XLA's printer trusts the ids: checked here first, so that a damaged module is an input
        # error and never native code reading past what the proto holds.
        problem = module_problem(candidate)
        if problem is not None:
            raise InputError(f"{origin or 'HLO proto'}: a malformed HLO module ({problem})",
                             "capture it again; the file was damaged or not written by XLA")
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


@cache
def _module_messages() -> Any:
    """An ``HloModuleProto`` reduced to the ids (XLA's ``hlo.proto`` field numbers), in a private pool."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="hlo_doctor/hlo/hlo_ids.proto", package="hlo_doctor.ids",
                                              syntax="proto2")
    for message, fields in (
            ("Instruction", (("opcode", 2, f.TYPE_STRING, f.LABEL_OPTIONAL, ""), ("id", 35, f.TYPE_INT64, f.LABEL_OPTIONAL, ""),
                             ("operand_ids", 36, f.TYPE_INT64, f.LABEL_REPEATED, ""),
                             ("control_predecessor_ids", 37, f.TYPE_INT64, f.LABEL_REPEATED, ""),
                             ("called_computation_ids", 38, f.TYPE_INT64, f.LABEL_REPEATED, ""))),
            ("Computation", (("instructions", 2, f.TYPE_MESSAGE, f.LABEL_REPEATED, ".hlo_doctor.ids.Instruction"),
                             ("id", 5, f.TYPE_INT64, f.LABEL_OPTIONAL, ""), ("root_id", 6, f.TYPE_INT64, f.LABEL_OPTIONAL, ""))),
            ("Module", (("computations", 3, f.TYPE_MESSAGE, f.LABEL_REPEATED, ".hlo_doctor.ids.Computation"),
                        ("entry_computation_id", 6, f.TYPE_INT64, f.LABEL_OPTIONAL, "")))):
        msg = file.message_type.add(name=message)
        for name, number, kind, label, type_name in fields:
            field = msg.field.add(name=name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("hlo_doctor.ids.Module"))


def module_problem(data: bytes) -> str | None:
    """What makes serialized ``HloModuleProto`` bytes unfit for XLA's printer, None when nothing does:
    an operand or control predecessor that is not an instruction defined earlier in its computation, a
    called computation not defined before its caller, a root or entry that does not exist, an id used
    twice. (XLA writes computations and instructions in post order, so every reference points back.)"""
    from google.protobuf.message import DecodeError

    try:
        module = _module_messages().FromString(data)
    except DecodeError:
        return None  # not a module at all: XLA's own reading says so
    computations: set[int] = set()
    for ci, comp in enumerate(module.computations):
        defined: set[int] = set()
        for ii, ins in enumerate(comp.instructions):
            # Set operations in C on the common path (a module holds tens of thousands of ids); the
            # message is worked out only for a bad instruction.
            operands, preds, called = ins.operand_ids, ins.control_predecessor_ids, ins.called_computation_ids
            if ins.id in defined or not defined.issuperset(operands) or (preds and not defined.issuperset(preds)) \
                    or (called and not computations.issuperset(called)):
                where = f"computation {ci}, instruction {ii} ({ins.opcode or '?'})"
                if ins.id in defined:
                    return f"{where}: id {ins.id} used twice"
                for kind, ids, known in (("operand", operands, defined), ("control predecessor", preds, defined),
                                         ("called computation", called, computations)):
                    missing = next((i for i in ids if i not in known), None)
                    if missing is not None:
                        return f"{where}: {kind} id {missing} is not defined before it"
            defined.add(ins.id)
        if comp.instructions and comp.root_id not in defined:
            return f"computation {ci}: root id {comp.root_id} is none of its instructions"
        if comp.id in computations:
            return f"computation {ci}: id {comp.id} used twice"
        computations.add(comp.id)
    if module.computations and module.HasField("entry_computation_id") and \
            module.entry_computation_id not in computations:
        return f"entry computation id {module.entry_computation_id} is none of its computations"
    return None


def module_proto_bytes(data: bytes) -> bytes:
    """The serialized ``HloModuleProto`` in ``data`` (an ``HloProto``'s module, or ``data`` itself)."""
    return _hlo_module_field(data) or data
