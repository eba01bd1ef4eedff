"""A finding that names the line where its function starts (the Python tracer's line for a call, or an
eager op first traced elsewhere in the process) still gets its fix at the one statement it changes."""

from __future__ import annotations

from hlo_doctor.fixes.catalog import load_source_fix
from hlo_doctor.fixes.source.base import Hint, NotApplicable, Rewritten
from hlo_doctor.fixes.source.lines import function_body_lines, rewrite_at

PROGRAM = '''import jax
import jax.numpy as jnp


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1)


def step(logits):
    logits = logits.astype(jnp.float32)
    return sample(logits)


def twice(a, b):
    a = a.astype(jnp.float32)
    b = b.astype(jnp.float32)
    return sample(a), sample(b)
'''


def _line(text: str) -> int:
    return PROGRAM.splitlines().index(text) + 1


def test_the_lines_of_the_function_that_starts_at_a_line() -> None:
    assert function_body_lines(PROGRAM, _line("def step(logits):")) == (_line("    logits = logits.astype(jnp.float32)"),
                                                                       _line("    return sample(logits)"))
    decorated = function_body_lines(PROGRAM, _line("@jax.jit"))
    assert decorated == (_line("    return jnp.argmax(logits, axis=-1)"),)
    assert function_body_lines(PROGRAM, _line("    return sample(logits)")) == ()  # not where a function starts
    assert function_body_lines("def (:\n", 1) == ()  # not Python: nothing


def test_a_fix_at_a_def_line_applies_to_the_one_statement_it_changes() -> None:
    fix = load_source_fix("eager-widening")
    hint = Hint(narrow_dtype="bf16", wide_dtype="f32")
    at_def = fix.rewrite(PROGRAM, _line("def step(logits):"), hint)
    assert isinstance(at_def, NotApplicable) and at_def.kind == "no-pattern"  # the line itself holds nothing
    line, outcome = rewrite_at(fix, PROGRAM, _line("def step(logits):"), hint)
    assert isinstance(outcome, Rewritten) and line == _line("    logits = logits.astype(jnp.float32)")
    # Two statements the fix would change: no guess, the refusal at the line named stands.
    line, outcome = rewrite_at(fix, PROGRAM, _line("def twice(a, b):"), hint)
    assert isinstance(outcome, NotApplicable) and line == _line("def twice(a, b):")
