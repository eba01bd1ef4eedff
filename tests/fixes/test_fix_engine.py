"""apply-fix bf16-greedy-sampler on hlo-doctor's own reference engine, run side by side with the original.

The engine tree is patched in a temporary copy (``patched_copy``, as verify builds its treatment),
loaded with ``hlo_doctor.engines.load_engine`` and compared with the original: the compiled sample()
(no aliasing copy, argmax reads bf16), the standalone convert program gone from a step, the warm-up
menu keyed on bf16, zero compiles in a steady-state decode and identical greedy tokens. A tree fixed
by hand the way the 0.24.0 attempt was (runner convert removed, menu left float32) compiles while
serving: that is why the menu is rekeyed in the same change.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fix_previous_version import downgrade
from test_fix_hlo import facts_of

import hlo_doctor.engine
from hlo_doctor.engines import load_engine
from hlo_doctor.fixes import FixApplied, FixRefused, FixSkipped, apply_fix, patched_copy, revert_fix

FIX = "bf16-greedy-sampler"
ENGINE_DIR = Path(hlo_doctor.engine.__file__).parent
SMALL = {
    "vocab_size": 2048,
    "hidden_size": 64,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 32,
    "mlp_dim": 128,
    "max_num_reqs": 8,
    "batch": 8,
    "prompt_len": 8,
    "max_tokens": 6,
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModuleType]:
    """The original engine and patched copies (full and upstream variants), loaded side by side."""
    base = tmp_path_factory.mktemp("engines")
    out = {"original": load_engine(None)}
    for variant in ("full", "upstream"):
        out[variant] = load_engine(patched_copy(FIX, ENGINE_DIR, base / variant, variant=variant))
    return out


def _config(engine: ModuleType, **overrides: object) -> object:
    return engine.EngineConfig(**{**SMALL, "check_recompilation": True, **overrides})


def test_engine_copy_apply_twice_revert(tmp_path: Path) -> None:
    tree = Path(shutil.copytree(ENGINE_DIR, tmp_path / "engine", ignore=shutil.ignore_patterns("__pycache__")))
    original = {p.name: p.read_bytes() for p in tree.glob("*.py")}
    dry = apply_fix(FIX, tree, dry_run=True)
    assert isinstance(dry, FixApplied) and dry.target_kind.startswith("hlo-doctor reference engine")
    assert {p.name for p in dry.files} == {"runner.py", "sampling.py", "compilation_manager.py"}
    assert "runner.dtype" in dry.diff
    assert isinstance(apply_fix(FIX, tree), FixApplied)
    assert isinstance(apply_fix(FIX, tree), FixSkipped)
    assert isinstance(revert_fix(FIX, tree), FixApplied)
    assert {p.name: p.read_bytes() for p in tree.glob("*.py")} == original


def test_previous_version_is_upgraded_and_reverts(tmp_path: Path) -> None:
    tree = Path(shutil.copytree(ENGINE_DIR, tmp_path / "engine", ignore=shutil.ignore_patterns("__pycache__")))
    original = {p.name: p.read_bytes() for p in tree.glob("*.py")}
    reference = Path(shutil.copytree(tree, tmp_path / "reference"))
    assert isinstance(apply_fix(FIX, reference), FixApplied)
    assert isinstance(apply_fix(FIX, tree), FixApplied)
    downgrade(tree / "runner.py", tree / "sampling.py", tree / "compilation_manager.py")
    upgraded = apply_fix(FIX, tree)
    assert isinstance(upgraded, FixApplied) and not upgraded.completed_partial
    assert any("earlier version" in note for note in upgraded.notes)
    assert set(upgraded.applied) == {"runner.post_sample_widening", "sampler.logprobs_widening_in_graph",
                                     "precompile.logprobs_dtype"}
    assert {p.name: p.read_bytes() for p in tree.glob("*.py")} == {p.name: p.read_bytes() for p in reference.glob("*.py")}
    assert isinstance(revert_fix(FIX, tree), FixApplied)
    assert {p.name: p.read_bytes() for p in tree.glob("*.py")} == original


def test_compiled_sample_has_no_copy_and_reads_bf16(engines: dict[str, ModuleType]) -> None:
    vocab, batch = SMALL["vocab_size"], 8
    logits = jax.random.normal(jax.random.key(1), (batch, vocab), jnp.bfloat16)
    for name, dtype in (("original", jnp.float32), ("full", jnp.bfloat16), ("upstream", jnp.bfloat16)):
        engine = engines[name]
        for logprobs in (False, True):
            meta = engine.TPUSupportedSamplingMetadata(do_sampling=False, logprobs=logprobs)
            text = engine.sample.lower(jax.random.key(0), None, logits.astype(dtype), meta).compile().as_text()
            facts = facts_of(text, batch, vocab)
            if name == "original":
                assert facts.aliasing_copy and facts.argmax_reads == f"f32[{batch},{vocab}]"
            else:
                assert not facts.aliasing_copy and facts.argmax_reads == f"bf16[{batch},{vocab}]"
                if name == "full" and not logprobs:
                    assert facts.logits_output is None and not facts.f32_logits_materialized
                else:
                    assert facts.logits_output == f"f32[{batch},{vocab}]"


def _step_programs(engine: ModuleType, logprobs: bool) -> list[str]:
    """Programs compiled by one cold ``_sample_from_logits`` on bf16 model logits."""
    config = _config(engine, logprobs=logprobs, check_recompilation=False)
    runner = engine.ModelRunner(config)
    metadata = runner.sampling_metadata(config.padded_num_reqs)
    logits = jax.random.normal(jax.random.key(2), (config.padded_num_reqs, config.vocab_size), jnp.bfloat16)
    jax.clear_caches()
    with engine.CompileWatch(explain=False) as watch:
        jax.block_until_ready(runner._sample_from_logits(logits, metadata).next_tokens)
    return [e.fun_name for e in watch.compiles()]


def test_standalone_convert_program_is_gone(engines: dict[str, ModuleType]) -> None:
    original = _step_programs(engines["original"], logprobs=False)
    patched = _step_programs(engines["full"], logprobs=False)
    assert any("convert_element_type" in name for name in original), original
    assert not any("convert_element_type" in name for name in patched), patched
    assert patched == ["jit(sample)"], patched


def test_no_eager_widening_program_with_logprobs_either(engines: dict[str, ModuleType]) -> None:
    original = _step_programs(engines["original"], logprobs=True)
    assert any("convert_element_type" in name for name in original), original
    for variant in ("full", "upstream"):
        patched = _step_programs(engines[variant], logprobs=True)
        # The logprobs computation widens its input in its own program: no eager convert in the step.
        assert patched == ["jit(sample)", "jit(compute_and_gather_logprobs)"], (variant, patched)


def test_warmup_menu_is_rekeyed_and_decode_compiles_nothing(engines: dict[str, ModuleType]) -> None:
    original = engines["original"].run_offline_batch(_config(engines["original"]))
    assert original.steady_state_compiles == 0
    for variant in ("full", "upstream"):
        engine = engines[variant]
        result = engine.run_offline_batch(_config(engine))
        assert result.steady_state_compiles == 0, result.compile_reasons
        np.testing.assert_array_equal(result.tokens, original.tokens)
    # The menu holds bf16 sample() programs: a bf16 call after warm-up compiles nothing, a float32 one does.
    engine = engines["full"]
    runner = engine.ModelRunner(_config(engine, check_recompilation=False))
    runner.load_model()
    runner.capture_model()
    meta = runner.sampling_metadata(8)
    for dtype, expected in ((jnp.bfloat16, 0), (jnp.float32, 1)):
        with engine.CompileWatch(explain=False) as watch:
            jax.block_until_ready(engine.sample(runner.rng_params_for_sampling, None, jnp.ones((8, 2048), dtype), meta))
        assert len(watch.compiles()) == expected, (dtype, watch.reasons())


@pytest.mark.parametrize("do_sampling", [False, True])
def test_logprobs_bit_identical_and_compiles_nothing(engines: dict[str, ModuleType], do_sampling: bool) -> None:
    sampling = {"do_sampling": True, "temperature": 0.7, "top_k": 20, "top_p": 0.9} if do_sampling else {}
    original = engines["original"].run_offline_batch(
        _config(engines["original"], logprobs=True, max_tokens=3, **sampling))
    for variant in ("full", "upstream"):
        patched = engines[variant].run_offline_batch(_config(engines[variant], logprobs=True, max_tokens=3, **sampling))
        assert patched.steady_state_compiles == 0, (variant, patched.compile_reasons)
        np.testing.assert_array_equal(patched.tokens, original.tokens)
        lp_patched, lp_original = np.asarray(patched.logprobs), np.asarray(original.logprobs)
        assert lp_patched.dtype == lp_original.dtype == np.float32
        # Bit for bit, not just equal values (NaN payloads and signed zeros included).
        np.testing.assert_array_equal(lp_patched.view(np.uint32), lp_original.view(np.uint32))


def test_hand_fix_without_rekeying_compiles_while_serving(tmp_path: Path) -> None:
    """The 0.24.0 attempt on the engine: convert removed, menu left float32."""
    tree = Path(shutil.copytree(ENGINE_DIR, tmp_path / "half", ignore=shutil.ignore_patterns("__pycache__")))
    runner = tree / "runner.py"
    text = runner.read_text()
    eager = "            logits = logits.astype(jnp.float32)\n            with self.maybe_forbid_compile:\n"
    assert text.count(eager) == 1
    runner.write_text(text.replace(eager, "            with self.maybe_forbid_compile:\n"))
    refused = apply_fix(FIX, tree)
    assert isinstance(refused, FixRefused) and refused.kind == "half-fixed"
    engine = load_engine(tree)
    config = dataclasses.replace(_config(engine), check_recompilation=False, max_tokens=3)
    result = engine.run_offline_batch(config)
    # Every sampling call misses the float32 menu: compiles in the serving window.
    assert result.steady_state_compiles >= 1
    assert any("sample" in reason for reason in result.compile_reasons), result.compile_reasons
