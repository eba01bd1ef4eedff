"""The parser on each construct XLA prints, with XLA as the judge.

Every module here is first re-printed by XLA's own parser (``hlo_module_from_text(...).to_string()``),
so the text under test is what XLA writes, and the instruction counts are XLA's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jaxlib import _hlo

from hlo_doctor.core.errors import InputError
from hlo_doctor.hlo import HloModule, parse_module, parse_modules, parse_shape


def _xla(text: str) -> str:
    """``text`` as XLA prints it after reading it (raises when XLA does not accept it)."""
    return str(_hlo.hlo_module_from_text(text).to_string())


def _counts_match(module: HloModule, text: str) -> None:
    """Our computations and instruction counts are XLA's (for the computations XLA prints)."""
    xla = {c.name: len(c.instructions()) for c in _hlo.hlo_module_from_text(text).computations()}
    ours = {c.name: len(c.instructions) for c in module.computations}
    assert ours == {name: xla[name] for name in ours}


BACKEND_CONFIG = '''HloModule m

%fused (p: f32[16,64]) -> f32[64,16] {
  %p = f32[16,64]{1,0} parameter(0)
  ROOT %t = f32[64,16]{1,0} transpose(%p), dimensions={1,0}
}

ENTRY %main (p0: f32[16,64]) -> f32[64,16] {
  %p0 = f32[16,64]{1,0} parameter(0)
  ROOT %f = f32[64,16]{1,0} fusion(%p0), kind=kCustom, calls=%fused, backend_config={
  "fusion_backend_config": {
    "kind": "__triton",
    "block_level_fusion_config": {"output_tiles": [{"sizes": ["4", "16"]}], "num_warps": "2"}
  }
}
}
'''


def test_backend_config_spanning_lines_stays_in_its_instruction() -> None:
    text = _xla(BACKEND_CONFIG)
    assert "\n  \"fusion_backend_config\"" in text  # XLA keeps the JSON over several lines
    module = parse_module(text)
    _counts_match(module, text)
    root = module.entry.root
    assert root.name == "f" and root.fusion_kind == "kCustom"
    assert '"num_warps": "2"' in root.attribute("backend_config")
    assert module.has_fusions and module.is_optimized and not module.is_scheduled


EXECUTION_THREAD = '''HloModule m

%called (input: s32[1024]) -> s32[1024] {
  %input = s32[1024]{0} parameter(0)
  ROOT %out = s32[1024]{0} add(%input, %input)
}, execution_thread="host"

ENTRY %main (p: s32[1024]) -> s32[1024] {
  %p = s32[1024]{0} parameter(0)
  %start = ((s32[1024]{0}), s32[1024]{0}, u32[]) call-start(%p), async_execution_thread="host", to_apply=%called
  ROOT %done = s32[1024]{0} call-done(%start)
}
'''


def test_execution_thread_closing_a_computation() -> None:
    text = _xla(EXECUTION_THREAD)
    assert '}, execution_thread="host"' in text
    module = parse_module(text)
    _counts_match(module, text)
    called = module.computation("called")
    assert called is not None and called.execution_thread == "host"
    assert module.entry_name == "main" and module.entry.execution_thread == ""
    assert module.entry.root.name == "done"


BUFFER = '''HloModule m

ENTRY %main (p: f32[32]) -> (f32[32], b(f32[32])) {
  %p = f32[32]{0} parameter(0)
  %buf = b(f32[32]{0}) custom-call(), custom_call_target="CreateBuffer"
  ROOT %t = (f32[32]{0}, b(f32[32]{0})) tuple(%p, %buf)
}
'''


def test_buffer_shapes() -> None:
    text = _xla(BUFFER)
    module = parse_module(text)
    _counts_match(module, text)
    buf = module.instruction("buf")
    assert buf is not None and buf.shape.is_buffer and buf.shape.text() == "b(f32[32]{0})"
    assert buf.shape.nbytes == 128
    assert module.entry.root.shape.text() == "(f32[32]{0}, b(f32[32]{0}))"


RECOVERY = '''HloModule m, origin_recovery_table={
  {"c"} : {"c_ovp"},
  "
    HloModule recovery_module, entry_computation_layout={(s32[2]{0})->s32[2]{0}}

    ENTRY %recovery_computation (p: s32[2]) -> s32[2] {
      ROOT %p = s32[2]{0} parameter(0)
    }
  "
}

ENTRY %main () -> s32[2] {
  ROOT %c = s32[2]{0} constant({1, 2})
}
'''


def test_embedded_module_in_origin_recovery_table_is_not_read_as_code() -> None:
    text = _xla(RECOVERY)
    assert "HloModule recovery_module" in text
    module = parse_module(text)
    assert [c.name for c in module.computations] == ["main"]
    assert module.entry.root.name == "c"
    assert len(parse_modules(text)) == 1
    assert "recovery_module" in module.attribute("origin_recovery_table")


DYNAMIC = '''HloModule m

ENTRY %main (p: f32[<=10]) -> f32[?,784] {
  %p = f32[<=10]{0} parameter(0)
  ROOT %r = f32[?,784]{1,0} custom-call(%p), custom_call_target="Dyn"
}
'''


def test_dynamic_and_bounded_dimensions_are_kept() -> None:
    text = _xla(DYNAMIC)
    module = parse_module(text)
    p, r = module.instruction("p"), module.instruction("r")
    assert p is not None and r is not None
    assert p.shape.text() == "f32[<=10]{0}" and p.shape.dims == (10,) and p.shape.dynamic == (True,)
    assert p.shape.nbytes == 40  # the bound: what XLA allocates
    assert r.shape.text() == "f32[?,784]{1,0}" and r.shape.dims == (-1, 784) and r.shape.is_dynamic
    assert r.shape.nbytes == 0  # unknown until run time
    assert parse_shape("f32[8,16]{1,0}").dynamic == ()


LAYOUTS = '''HloModule m

ENTRY %main (p: f32[512,1024]) -> f32[512,1024] {
  %p = f32[512,1024]{1,0:T(8,128)} parameter(0)
  %host = f32[512,1024]{1,0:T(8,128)S(5)} copy(%p)
  %packed = s4[1024]{0:T(1024)(128)(2,1)E(4)} constant({...})
  ROOT %back = f32[512,1024]{1,0:T(8,128)} copy(%host)
}
'''


def test_memory_space_and_tiles_are_kept_in_the_layout() -> None:
    text = _xla(LAYOUTS)
    module = parse_module(text)
    _counts_match(module, text)
    p, host, packed = (module.instruction(n) for n in ("p", "host", "packed"))
    assert p is not None and host is not None and packed is not None
    assert host.shape.text() == "f32[512,1024]{1,0:T(8,128)S(5)}"
    assert host.shape.layout == "1,0:T(8,128)S(5)" and host.shape.layout != p.shape.layout
    assert (host.shape.memory_space, p.shape.memory_space) == (5, 0)
    assert host.shape.tiles == "(8,128)" and host.shape.minor_to_major == (1, 0)
    assert packed.shape.tiles == "(1024)(128)(2,1)" and packed.shape.element_bits == 4
    assert packed.shape.nbytes == 512


@pytest.mark.parametrize(("dtype", "nbytes"), [
    ("s1", 16), ("s2", 32), ("s4", 64), ("u1", 16), ("u2", 32), ("u4", 64), ("f4e2m1fn", 64),
    ("f8e4m3fn", 128), ("f8e5m2", 128), ("f8e8m0fnu", 128), ("pred", 128), ("bf16", 256),
])
def test_narrow_types_count_their_bits(dtype: str, nbytes: int) -> None:
    text = _xla(f"HloModule m\n\nENTRY %main (p: {dtype}[128]) -> {dtype}[128] {{\n"
                f"  ROOT %p = {dtype}[128]{{0}} parameter(0)\n}}\n")
    assert parse_module(text).entry.root.shape.nbytes == nbytes


def test_a_line_it_cannot_read_is_an_error_naming_the_line() -> None:
    text = _xla(BUFFER).replace("  ROOT %t", "  this is not HLO\n  ROOT %t")
    with pytest.raises(InputError, match=r"^m\.hlo:\d+: cannot parse an instruction"):
        parse_module(text, origin="m.hlo")
    stray = _xla(BUFFER) + "\nsomething else\n"
    with pytest.raises(InputError, match=r"^m\.hlo:\d+: not a computation: 'something else'"):
        parse_module(stray, origin="m.hlo")
    empty = _xla(BUFFER) + "\n%empty () -> f32[] {\n}\n"
    with pytest.raises(InputError, match=r"^m\.hlo:10: computation empty has no instructions"):
        parse_module(empty, origin="m.hlo")


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.9])
def test_truncated_module_is_an_error(cut: float) -> None:
    text = _xla(BACKEND_CONFIG)
    with pytest.raises(InputError, match="truncated"):
        parse_module(text[: int(len(text) * cut)], origin="cut.hlo")


def test_deeply_nested_tuple_is_an_error_not_a_recursion_error() -> None:
    deep = "(" * 5000 + "f32[]" + ")" * 5000
    text = f"HloModule m\n\nENTRY %main () -> f32[] {{\n  %t = {deep} tuple()\n  ROOT %c = f32[] constant(0)\n}}\n"
    with pytest.raises(InputError, match="deeper than"):
        parse_module(text)
    with pytest.raises(ValueError, match="deeper than"):
        parse_shape(deep)
    assert parse_shape("(" * 60 + "f32[]" + ")" * 60).nbytes == 4


def test_scheduled_and_fused_modules_say_so() -> None:
    lowered = jax.jit(lambda x: jnp.sin(x) * 2.0).lower(jnp.ones((8,), jnp.float32))
    before = parse_module(lowered.as_text(dialect="hlo"))
    after = parse_module(lowered.compile().as_text())
    assert not before.is_scheduled and not before.has_fusions and not before.is_optimized
    assert after.is_scheduled and after.is_optimized
    assert after.attribute("is_scheduled") == "true"


def _programs() -> list[str]:
    """Optimized modules of a few real programs on XLA:CPU: loops, reductions, tuples, sorts."""
    def loop(x: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, 4, lambda i, c: c * 1.5 + jnp.tanh(c), x)

    def attention(q: jax.Array, k: jax.Array) -> jax.Array:
        return jax.nn.softmax(q @ k.T / 8.0, axis=-1)

    def sample(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.argmax(logits, axis=-1), jnp.sort(logits, axis=-1)[:, -4:]

    def cond(x: jax.Array) -> jax.Array:
        return jax.lax.cond(x.sum() > 0, jnp.exp, jnp.cos, x)

    x = jnp.ones((16, 32), jnp.float32)
    return [
        jax.jit(loop).lower(x).compile().as_text(),
        jax.jit(attention).lower(x, x).compile().as_text(),
        jax.jit(sample).lower(x.astype(jnp.bfloat16)).compile().as_text(),
        jax.jit(cond).lower(x).compile().as_text(),
        jax.jit(loop).lower(x).as_text(dialect="hlo"),
    ]


@pytest.mark.parametrize("index", range(5))
def test_real_programs_match_xla_instruction_counts(index: int) -> None:
    text = _programs()[index]
    module = parse_module(text)
    xla = _hlo.hlo_module_from_text(text)
    _counts_match(module, text)
    assert {c.name for c in module.computations} <= {c.name for c in xla.computations()}
    for comp in xla.computations():
        for inst in comp.instructions():
            ours = module.instruction(inst.name, comp.name)
            if ours is not None:
                assert inst.to_string().split(" = ", 1)[1].startswith(ours.shape.text() + " ")
