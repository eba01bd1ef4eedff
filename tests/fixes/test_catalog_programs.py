"""Each file fix on a real program: run on XLA:CPU before and after the fix, over several inputs, and
the rule's finding on the compiled HLO before and after.

The programs are in ``tests/fixes/programs/``; each is copied, fixed through ``apply_source_fix`` (the
transaction a user's file goes through) at the line a finding names, and both copies are imported
side by side (``fix_programs``). Outputs are compared bit for bit (``tobytes``), NaN and ties included.
"""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from fix_programs import PROGRAMS, SEEDS, bits, count_findings, fixed_pair, line_of, load_module, same_outputs
from fix_programs import forget_modules as forget_modules  # autouse: imported copies dropped after each test

from hlo_doctor.fixes import FixRefused
from hlo_doctor.fixes.source.apply import apply_source_fix
from hlo_doctor.fixes.source.base import Hint


def test_donate_state_on_a_gemma_style_sampler_loop(tmp_path: Path) -> None:
    before, after, result = fixed_pair(tmp_path, "sampler_loop.py", "donate-state",
                                       [("jax.lax.while_loop", Hint(argument="state"))])
    assert 'donate_argnames="state"' in result.diff and result.variant == "safe"
    same_outputs(before, after)
    # The copies of the caches before the loop are gone: HD009 on the compiled loop, before and after.
    for module, expected in ((before, 1), (after, 0)):
        params, state = module.init(0)
        got = count_findings(tmp_path, "HD009", module.__name__,
                             lambda m=module, p=params, s=state: m.SamplerLoop._sample_loop.lower(m.LOOP, params=p, state=s))
        assert got == expected, module.__name__
    # The donated state really is handed over: the caller's caches are deleted after the call.
    params, state = after.init(0)
    after.LOOP.sample(params, state)
    assert state.cache[0].is_deleted()


def test_eager_widening_dropped_and_moved(tmp_path: Path) -> None:
    bf16 = Hint(narrow_dtype="bf16", wide_dtype="f32")
    before, after, result = fixed_pair(tmp_path, "greedy_widen.py", "eager-widening",
                                       [("logits = logits.astype(jnp.float32)", bf16),
                                        ("sample_with_logits(logits.astype", bf16)])
    assert [e.detail.split(":")[0] for e in result.elements] == ["safe", "unsafe"]
    assert "logits = logits.astype(jnp.float32)" in result.diff.split("@@")[-1]  # moved into the sampler
    same_outputs(before, after)
    logits = before.inputs(0)
    assert logits.dtype == jnp.bfloat16
    # The jitted samplers now take the bf16 logits: no f32 copy is made outside them.
    assert after.sample.lower(logits).compile().as_text().count("bf16[16,2048]") >= 1


def test_argmax_without_softmax_on_a_temperature_softmax(tmp_path: Path) -> None:
    before, after, result = fixed_pair(tmp_path, "softmax_greedy.py", "argmax-without-softmax",
                                       [("jax.nn.softmax", Hint())])
    assert result.variant == "unsafe" and "probabilities" in result.diff
    same_outputs(before, after)
    args = (jnp.zeros((8, 4096), jnp.bfloat16), jnp.float32(0.7))
    assert count_findings(tmp_path, "HD011", "before", lambda: before.sample.lower(*args)) == 1
    assert count_findings(tmp_path, "HD011", "after", lambda: after.sample.lower(*args)) == 0


def test_slice_before_matmul_on_a_prefill(tmp_path: Path) -> None:
    before, after, result = fixed_pair(tmp_path, "prefill_head.py", "slice-before-matmul",
                                       [("logits = h @ w", Hint(rank=3))])
    assert "logits = h[:, -1] @ w" in result.diff and result.variant == "unsafe"
    for seed in SEEDS:
        (tok_a, last_a), (tok_b, last_b) = before.outputs(seed), after.outputs(seed)
        assert bits((tok_a,)) == bits((tok_b,)), seed
        # Why the fix is unsafe: XLA:CPU tiles a 4-row matmul differently from a 64-row one, and the
        # logits differ in their last bits (the tokens do not, here).
        np.testing.assert_allclose(np.asarray(last_a), np.asarray(last_b), rtol=0, atol=1e-5)
    args = (jnp.zeros((4, 16, 128)), jnp.zeros((128, 8000)))
    assert count_findings(tmp_path, "HD012", "before", lambda: before.prefill.lower(*args)) == 1
    assert count_findings(tmp_path, "HD012", "after", lambda: after.prefill.lower(*args)) == 0




def test_donate_state_on_module_level_state_rebound_from_the_result(tmp_path: Path) -> None:
    # `_state = decode(_state)` then `return _state[2]`: every later read is of the new value.
    before, after, result = fixed_pair(tmp_path, "module_state.py", "donate-state",
                                       [("jax.lax.fori_loop", Hint(argument="state"))])
    assert 'jax.jit(_decode, donate_argnames="state")' in result.diff and result.variant == "safe"
    same_outputs(before, after)
    for module, expected in ((before, 1), (after, 0)):
        got = count_findings(tmp_path, "HD009", module.__name__, lambda m=module: m.decode.lower(m.init(0)))
        assert got == expected, module.__name__
    # The old cache is handed over, and the program still runs: no read after the call touches it.
    after.reset(0)
    old = after._state
    after.step()
    assert old[0].is_deleted() and not after._state[0].is_deleted()


def test_donate_state_refuses_where_a_caller_keeps_a_returned_part(tmp_path: Path) -> None:
    # The same loop with each call's token kept in a list while the next call runs: refused, with the
    # line. Donated by hand, the program really does read a deleted array (what the refusal prevents).
    text = (PROGRAMS / "module_state.py").read_text().replace("[int(step()) for", "[step() for").replace(
        "*map(jnp.int32, tokens)", "*tokens")
    path = tmp_path / "kept.py"
    path.write_text(text)
    result = apply_source_fix("donate-state", path, [(line_of(path, "jax.lax.fori_loop"), Hint(argument="state"))],
                              unsafe=True)
    assert isinstance(result, FixRefused), result
    assert f"line {line_of(path, '[step() for')} keeps it while step() runs again" in result.reason
    assert path.read_text() == text
    donated = tmp_path / "donated.py"
    donated.write_text(text.replace("jax.jit(_decode)", 'jax.jit(_decode, donate_argnames="state")'))
    module = load_module(donated, "kept_donated_after")
    with pytest.raises(RuntimeError, match="deleted"):
        bits(module.outputs(0))
    assert bits(load_module(path, "kept_before").outputs(0))  # as written, it runs
