"""With logprobs on, on the real releases (0.23.0, 0.24.0, 0.26.0 and the newest).

The released runner widens the model's logits to float32 eagerly (its own program: a standalone
convert) and hands them to the jitted ``compute_and_gather_logprobs``. The patched runner hands the
model's logits (bf16) and the patched ``compute_and_gather_logprobs`` widens them in its own program;
its precompile entry is keyed on the model dtype (float32 where the runner feeds it sample()'s
processed output). Checked here on the real functions, compiled on CPU: every element of the fix is
found fixed in the patched runner (no eager widening left, logprobs or not, both variants), the
patched logprobs program reads bf16 and is not a standalone convert, the patched ``sample()`` with
logprobs holds no aliasing copy, and the logprobs are bit-identical (float32) to the released path:
raw logprobs from the runner's logits and processed logprobs from sample()'s own output.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixtures_wheels import import_tpu_sampling, releases_under_test, unpack
from test_fix_hlo import _logits, _lower, _mesh, _metadata, facts_of

from hlo_doctor.fixes import FixApplied, FixSkipped, apply_fix
from hlo_doctor.hlo import parse_module

FIX = "bf16-greedy-sampler"
B, V, K = 16, 2048, 5

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=releases_under_test())
def trees(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Released and patched (full, upstream) trees of one release."""
    version = request.param
    base = tmp_path_factory.mktemp(f"logprobs-{version}")
    released = unpack(version, base / "released")
    out = {"released": released}
    for variant in ("full", "upstream"):
        patched = Path(shutil.copytree(released, base / variant))
        result = apply_fix(FIX, patched, variant=variant)
        if isinstance(result, FixSkipped) and result.kind == "not-affected":
            pytest.skip(f"{version}: {result.reason}")
        assert isinstance(result, FixApplied), result
        states = {e.element: e.state for e in result.elements}
        assert set(states.values()) == {"original", "fixed"} and "missing" not in states.values()
        again = apply_fix(FIX, patched, variant=variant)
        assert isinstance(again, FixSkipped) and all(e.state == "fixed" for e in again.elements
                                                     if e.element in result.applied)
        out[variant] = patched
    return out


def _gather(sampling: ModuleType, x: jax.Array, tokens: jax.Array) -> tuple[tuple[np.ndarray, ...], str]:
    """``compute_and_gather_logprobs(x, tokens, K)`` compiled as the release jits it: outputs and HLO."""
    with jax.set_mesh(_mesh()):
        compiled = sampling.compute_and_gather_logprobs.lower(x, tokens, K).compile()
        out = compiled(x, tokens)
    return tuple(np.asarray(a) for a in out), compiled.as_text()


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32) if a.dtype == np.float32 else a


def _assert_bit_identical(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(_bits(g), _bits(w))
    assert got[1].dtype == np.float32  # the logprobs themselves


def _is_standalone_convert(hlo_text: str) -> bool:
    module = parse_module(hlo_text)
    ops = {i.opcode for i in module.entry_instructions()} - {"parameter", "tuple", "get-tuple-element", "bitcast"}
    return ops <= {"convert", "copy"} or (ops == {"fusion"} and len(module.entry_instructions()) <= 3)


@pytest.mark.parametrize("variant", ["full", "upstream"])
def test_raw_logprobs_bit_identical_without_a_standalone_convert(trees: dict[str, Path], variant: str) -> None:
    logits = _logits(seed=3)
    tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    with import_tpu_sampling(trees["released"]) as released:
        # The released runner: an eager widening (its own program), then the float32 logprobs program.
        widened = logits.astype(jnp.float32)
        want, _ = _gather(released, widened, tokens)
    with import_tpu_sampling(trees[variant]) as patched:
        got, text = _gather(patched, logits, tokens)
        again, _ = _gather(patched, widened, tokens)  # float32 input (processed logprobs): unchanged program
    _assert_bit_identical(got, want)
    _assert_bit_identical(again, want)
    module = parse_module(text)
    params = [i for i in module.entry_instructions() if i.opcode == "parameter"]
    assert any(p.shape.text(with_layout=False) == f"bf16[{B},{V}]" for p in params), text
    assert not _is_standalone_convert(text)
    # Control: the released runner's eager widening is what the check calls a standalone convert.
    assert _is_standalone_convert(jax.jit(lambda a: a.astype(jnp.float32)).lower(logits).compile().as_text())


@pytest.mark.parametrize("variant", ["full", "upstream"])
def test_processed_logprobs_from_sample_output_bit_identical(trees: dict[str, Path], variant: str) -> None:
    logits = _logits(seed=4)
    with import_tpu_sampling(trees["released"]) as released:
        meta = _metadata(released, logprobs=True)
        x = logits.astype(jnp.float32)
        compiled = _lower(released, x, meta).compile()
        tokens_want, processed_want = compiled(jax.random.key(0), x, meta)
        want, _ = _gather(released, processed_want, tokens_want.astype(jnp.int32))
    with import_tpu_sampling(trees[variant]) as patched:
        meta = _metadata(patched, logprobs=True)
        compiled = _lower(patched, logits, meta).compile()
        facts = facts_of(compiled.as_text())
        tokens_got, processed_got = compiled(jax.random.key(0), logits, meta)
        got, _ = _gather(patched, processed_got, tokens_got.astype(jnp.int32))
    # sample() with logprobs on: no aliasing copy, argmax on bf16, float32 logits computed in-graph.
    assert not facts.aliasing_copy and facts.argmax_reads == f"bf16[{B},{V}]"
    assert facts.logits_output == f"f32[{B},{V}]"
    np.testing.assert_array_equal(np.asarray(tokens_got), np.asarray(tokens_want))
    np.testing.assert_array_equal(_bits(np.asarray(processed_got)), _bits(np.asarray(processed_want)))
    _assert_bit_identical(got, want)
