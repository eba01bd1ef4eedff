from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from hlo_doctor.core.errors import InputError
from hlo_doctor.hlo import is_convert_only, module_text_from_proto, parse_module, parse_shape


def _compiled_text(fn, *args, **kw) -> str:
    return jax.jit(fn, **kw).lower(*args).compile().as_text()


def test_shapes() -> None:
    s = parse_shape("f32[512,256000]{1,0}")
    assert (s.dtype, s.dims, s.layout, s.nbytes) == ("f32", (512, 256000), "1,0", 512 * 256000 * 4)
    t = parse_shape("(s32[64]{0}, (bf16[2,3]{1,0}, f32[]))")
    assert t.is_tuple and t.nbytes == 64 * 4 + 12 + 4
    assert t.text(with_layout=False) == "(s32[64], (bf16[2,3], f32[]))"


def test_returning_input_has_live_out_copy_of_parameter() -> None:
    def sample(logits):
        return jnp.argmax(logits, axis=-1), logits

    m = parse_module(_compiled_text(sample, jnp.ones((8, 128), jnp.float32)))
    copies = [i for i in m.entry.instructions if i.opcode == "copy"]
    assert len(copies) == 1
    copy = copies[0]
    (operand,) = m.operands_of(copy)
    assert operand.opcode == "parameter" and operand.parameter_number == 0
    assert m.is_live_out(copy) and m.output_indices_of(copy) == [1]
    assert copy.shape.layout == operand.shape.layout == "1,0"
    argmax = next(i for i in m.entry.instructions if i.opcode == "fusion")
    assert argmax.source.endswith("test_hlo.py:" + str(argmax.source_line))
    assert argmax.op_name.endswith("/reduce")


def test_bf16_input_widened_in_graph_has_no_copy() -> None:
    def sample(logits):
        return jnp.argmax(logits, axis=-1), logits.astype(jnp.float32)

    m = parse_module(_compiled_text(sample, jnp.ones((8, 128), jnp.bfloat16)))
    assert not [i for i in m.entry.instructions if i.opcode == "copy"]
    converts = [i for i in m.entry.instructions if is_convert_only(m, i)]
    assert len(converts) == 1 and m.is_live_out(converts[0])


def test_donation_is_recorded() -> None:
    m = parse_module(_compiled_text(lambda x: x * 2, jnp.ones((4, 8)), donate_argnums=0))
    assert m.aliased_parameters() == {0}


def test_garbage_is_an_input_error() -> None:
    with pytest.raises(InputError):
        parse_module("not hlo at all", origin="x.txt")
    with pytest.raises(InputError):
        parse_module("HloModule m\n\nENTRY %main {\n  %p = f32[] parameter(0)\n", origin="t.txt")


def test_module_text_from_proto_reads_bare_and_wrapped_modules() -> None:
    from jaxlib import _hlo

    text = _compiled_text(lambda x: x * 2.0, jnp.ones((4,), jnp.float32))
    module_bytes = _hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    # HloProto { HloModuleProto hlo_module = 1; }: tag 0x0a, varint length, the module's bytes.
    n, length = len(module_bytes), b""
    while True:
        length += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    wrapped = b"\x0a" + length + module_bytes
    bare_text = module_text_from_proto(module_bytes)
    assert module_text_from_proto(wrapped) == bare_text
    assert parse_module(bare_text).entry.root.shape.text() == "f32[4]{0}"
    with pytest.raises(InputError, match="not a serialized HLO module"):
        module_text_from_proto(b"\x0a\x03abc", origin="x.pb")
