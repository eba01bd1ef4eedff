"""Each buffer's op, shape and line read from the ``HloModuleProto`` (``memory.hlo_fields``), judged
against xprof's memory viewer (its ``opCode`` and ``shapeString`` for the buffers at the peak), against
the text path (XLA's printer, then the parser: every instruction of every program of a capture), and
against jaxlib's own numbering of element types."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hlo_doctor.hlo import parse_module
from hlo_doctor.hlo.navigation import key_instruction
from hlo_doctor.hlo.printer import print_modules
from hlo_doctor.memory import read_memory
from hlo_doctor.memory.hlo_fields import ELEMENT_TYPES, UnwritableShape, module_from_hlo_proto
from hlo_doctor.memory.read import memory_from_protos
from hlo_doctor.trace import find_xplanes
from hlo_doctor.trace.read import read_module_protos

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SMALL = 16 * 1024
"""xprof folds buffers under this size into one "small" entry."""


@pytest.mark.parametrize("capture", ["engine_b64_original_a", "gpu_h200_original"])
def test_ops_and_shapes_at_the_peak_equal_xprofs(capture: str, tmp_path: Path) -> None:
    from xprof.convert import raw_to_tool_data

    report = read_memory(SAMPLES / capture, only=("jit_decode_forward",))
    copy = tmp_path / find_xplanes(SAMPLES / capture)[0].name
    shutil.copy(find_xplanes(SAMPLES / capture)[0], copy)
    raw_to_tool_data.xspace_to_tool_names([str(copy)])
    checked = 0
    for p in report.programs:
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "memory_viewer", {"module_name": p.label})
        theirs = sorted((str(o["instructionName"]), str(o["opCode"]), str(o["shapeString"]))
                        for o in json.loads(data).get("maxHeap", []) if o.get("instructionName"))
        mine = sorted((b.instruction, b.opcode, b.shape) for b in p.buffers_at_peak if b.size_bytes >= SMALL)
        assert mine == theirs, p.label
        checked += len(mine)
    assert checked > 10


def test_every_instruction_equals_the_text_path() -> None:
    seen = set()
    compared = 0
    for proto in read_module_protos(find_xplanes(SAMPLES / "gpu_h200_original")[0]):
        if (proto.name, proto.program_id) in seen:
            continue
        seen.add((proto.name, proto.program_id))
        lazy = module_from_hlo_proto(proto.hlo_proto)
        assert lazy is not None, proto.name
        mine = lazy.whole()
        text = print_modules([(proto.hlo_proto, proto.name, proto.host, proto.path)])[0]
        assert isinstance(text, str)
        theirs = parse_module(text, origin=proto.name)
        assert sum(1 for _ in mine.instructions()) == sum(1 for _ in theirs.instructions())
        for t in theirs.instructions():
            m = mine.instruction(t.name, t.computation)
            assert m is not None, t.name
            # A while's condition and body are printed in another order than the proto keeps them.
            assert (m.opcode, m.shape.text(), m.stack, m.source, m.is_root, sorted(m.called_computations)) == \
                (t.opcode, t.shape.text(), t.stack, t.source, t.is_root, sorted(t.called_computations)), t.name
            if t.opcode == "fusion":
                found = lazy.instruction(t.name)
                assert found is not None
                assert key_instruction(theirs, t).name == lazy.key_instruction(found).name, t.name
            compared += 1
    assert compared > 1000


def test_element_types_are_jaxlibs() -> None:
    from jax._src.lib import xla_client

    numbered = {int(m.value): m.name.lower() for m in xla_client.PrimitiveType.__members__.values()}
    for number, name in ELEMENT_TYPES.items():
        assert numbered[number] == ("opaque_type" if name == "opaque" else name)


def test_a_shape_field_not_read_falls_back_to_the_text() -> None:
    """A layout with a memory space (``S(1)``) is not written from the proto: the module is printed
    and parsed as before, and its buffers keep their shapes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="test_layout.proto", package="t", syntax="proto3")
    for name, number, kind in (("Layout", 8, None), ("Shape", 5, "Layout"), ("Inst", 3, "Shape"),
                               ("Comp", 2, "Inst"), ("Module", 3, "Comp"), ("Hlo", 1, "Module")):
        m = file.message_type.add(name=name)
        f = m.field.add(name="f", number=number, label=F.LABEL_REPEATED if name in ("Comp", "Module")
                        else F.LABEL_OPTIONAL)
        if kind is None:
            f.type = F.TYPE_INT64
        else:
            f.type, f.type_name = F.TYPE_MESSAGE, f".t.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    hlo = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Hlo"))
    protos = [p for p in read_module_protos(find_xplanes(SAMPLES / "engine_b64_original_a")[0])
              if p.name == "jit_sample"][:1]
    msg = hlo.FromString(protos[0].hlo_proto)
    msg.f.f[-1].f[0].f.f.f = 1  # the entry's first instruction: memory space 1
    changed = msg.SerializeToString()
    assert module_from_hlo_proto(protos[0].hlo_proto) is not None
    lazy = module_from_hlo_proto(changed)
    assert lazy is not None
    with pytest.raises(UnwritableShape):
        lazy.whole()
    before = memory_from_protos(protos, origin="x").programs[0]
    after = memory_from_protos([type(protos[0])(protos[0].name, protos[0].program_id, changed, protos[0].host,
                                                protos[0].path)], origin="x").programs[0]
    assert after.peak_bytes == before.peak_bytes
    assert [b.shape for b in after.buffers_at_peak if b.category == "temporary"] == \
        [b.shape for b in before.buffers_at_peak if b.category == "temporary"]
    assert not any("S(1)" in b.shape for b in before.buffers_at_peak)
    assert all(b.shape for b in after.buffers_at_peak)
    assert any("S(1)" in b.shape for b in after.buffers_at_peak)  # as XLA's printer writes it
