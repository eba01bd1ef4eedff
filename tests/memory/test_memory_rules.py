"""Each memory rule's freed bytes equal the compiled peak difference (jax's ``memory_analysis()``)
between a program with the waste and the same program without it: compile-time figures, exact."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from hlo_doctor.hlo import parse_module
from hlo_doctor.lint import Context, load_rulebook, run_rule
from hlo_doctor.memory import MemoryReport, memory_of_compiled

S = jax.ShapeDtypeStruct
BF16, F32 = jnp.bfloat16, jnp.float32


def _compile(f: Callable[..., Any], args: Sequence[Any], donate: tuple[int, ...] = ()) -> Any:
    return jax.jit(f, donate_argnums=donate).lower(*args).compile()


def _context(*compiled: Any) -> Context:
    """The rules' view of compiled programs: their optimized HLO and buffer assignments."""
    modules, programs = [], []
    for c in compiled:
        m = parse_module(c.as_text(), origin="compiled")
        modules.append(m)
        programs.append(memory_of_compiled(c, name=m.name))
    return Context(modules=tuple(modules), memory=MemoryReport("compiled", tuple(programs)), origin="compiled",
                   kind="hlo")


def _findings(code: str, ctx: Context) -> list[Any]:
    rule = next(r for r in load_rulebook(()).rules if r.code == code)
    return run_rule(rule, ctx)


def _peak(c: Any) -> int:
    return int(c.memory_analysis().peak_memory_in_bytes)


def _cache_step(cache: Any, row: Any, pos: Any) -> Any:
    return jax.lax.dynamic_update_slice(cache, row[None], (pos, 0, 0)), row.sum()


def _scatter_step(cache: Any, rows: Any, idx: Any) -> Any:
    return cache.at[idx].set(rows)


def _loop_state(state: Any, x: Any) -> Any:
    return jax.lax.fori_loop(0, 4, lambda i, s: s.at[i].add(x), state)


STATE_CASES = {
    "kv cache row update": (_cache_step, (S((32, 512, 128), BF16), S((512, 128), BF16), S((), jnp.int32))),
    "scatter of rows": (_scatter_step, (S((4096, 256), F32), S((16, 256), F32), S((16,), jnp.int32))),
    "loop-carried state": (_loop_state, (S((8, 1024, 64), F32), S((1024, 64), F32))),
}


@pytest.mark.parametrize("case", list(STATE_CASES))
def test_hd016_freed_bytes_equal_the_compiled_difference_of_donating(case: str) -> None:
    f, args = STATE_CASES[case]
    wasteful, fixed = _compile(f, args), _compile(f, args, donate=(0,))
    found = _findings("HD016", _context(wasteful))
    assert len(found) == 1, found
    freed = dict(found[0].extra)["freed_bytes"]
    assert freed == _peak(wasteful) - _peak(fixed) > 0
    assert not _findings("HD016", _context(fixed))


def _returns_input(x: Any) -> Any:
    return jnp.argmax(x, -1), x


def _returns_widened(x: Any) -> Any:
    return jnp.argmax(x, -1), x.astype(F32)


def _returns_three(x: Any) -> Any:
    return jnp.argmax(x, -1), x, x.sum(-1)


TWIN_CASES = {
    "greedy sampler returns its f32 input": (_returns_input, lambda x: jnp.argmax(x, -1), (S((64, 32000), F32),)),
    "widened logits returned": (_returns_widened, lambda x: jnp.argmax(x, -1), (S((64, 32000), BF16),)),
    "input returned beside two results": (_returns_three, lambda x: (jnp.argmax(x, -1), x.sum(-1)),
                                          (S((64, 32000), F32),)),
    "eager widening before the sampler": (lambda x: jnp.argmax(x, -1), None, (S((64, 32000), F32),)),
}


@pytest.mark.parametrize("case", list(TWIN_CASES))
def test_hd017_freed_bytes_equal_the_compiled_difference_without_the_twin(case: str) -> None:
    f, g, args = TWIN_CASES[case]
    wasteful = _compile(f, args)
    if g is None:  # the argument is widened by an eager convert program; the fix passes the bf16 value
        widen = _compile(lambda x: x.astype(F32), (S(args[0].shape, BF16),))
        fixed = _compile(f, (S(args[0].shape, BF16),))
        ctx = _context(wasteful, widen)
    else:
        fixed = _compile(g, args)
        ctx = _context(wasteful)
    found = [x for x in _findings("HD017", ctx) if x.module == ctx.modules[0].name]
    assert len(found) == 1, found
    assert dict(found[0].extra)["freed_bytes"] == _peak(wasteful) - _peak(fixed) > 0
    assert not _findings("HD017", _context(fixed))


def test_the_seed_engines_sampler_at_batch_64_as_computed_equals_its_capture() -> None:
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from memory_seed import measure
    finally:
        sys.path.pop(0)
    from hlo_doctor.cli.memory import memory_report

    figures = measure(64, 256000)
    captured = memory_report(root / "sample_traces" / "engine_b64_original_a")
    step = {p.module: p.peak_bytes for p in captured.step_programs}
    assert figures["peak_bytes"]["sample"] == step["jit_sample"]
    assert figures["peak_bytes"]["convert"] == step["jit_convert_element_type"]
    assert figures["hd017_freed_bytes"] == figures["sample_minus_fixed_bytes"]
