"""The reference engine on real JAX (CPU): the precompiled menu, the recompilation guard, the
sampler, the offline batch driver, and the three ops of the upstream report in its HLO and traces.

Most tests run a small engine (vocab 2048, hidden 64, buckets 8 and 16) warmed once per module; one
test compiles the sampler at the real default shape f32[64,256000].
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hlo_doctor import engine as eng
from hlo_doctor.engine.recompilation import CompileWatch, ForbidCompile, RecompilationError
from hlo_doctor.engine.sampling import compute_and_gather_logprobs, sample, topk_mask, topp_mask
from hlo_doctor.engine.sampling_metadata import TPUSupportedSamplingMetadata
from hlo_doctor.hlo import parse_module

SMALL = dict(vocab_size=2048, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=1, head_dim=16,
             mlp_dim=128, max_num_reqs=16, batch=16, prompt_len=8, max_tokens=6)


@pytest.fixture(scope="module")
def warm_runner() -> eng.ModelRunner:
    """A small runner with parameters and the whole precompiled menu built."""
    runner = eng.ModelRunner(eng.EngineConfig(**SMALL))
    runner.load_model()
    runner.capture_model()
    return runner


@pytest.fixture(scope="module")
def greedy_run() -> tuple[eng.BatchResult, list[tuple[str, int, int]]]:
    """A small greedy offline batch and every ``progress(stage, done, total)`` call it made."""
    calls: list[tuple[str, int, int]] = []
    result = eng.run_offline_batch(eng.EngineConfig(**SMALL), progress=lambda *call: calls.append(call))
    return result, calls


@pytest.fixture(scope="module")
def greedy_result(greedy_run: tuple[eng.BatchResult, list[tuple[str, int, int]]]) -> eng.BatchResult:
    return greedy_run[0]


# -- configuration -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        (dict(batch=65), "above the largest num_reqs bucket (64)"),
        (dict(max_tokens=0), "max_tokens=0"),
        (dict(prompt_len=0), "prompt_len=0"),
        (dict(vocab_size=0), "vocab_size=0"),
        (dict(max_num_reqs=4, batch=4), "max_num_reqs=4"),
        (dict(num_heads=3, num_kv_heads=2), "num_heads=3"),
        (dict(vocab_size=4, max_logprobs=5), "max_logprobs=5"),
        (dict(do_sampling=True, top_k=300000), "top_k=300000"),
        (dict(do_sampling=True, top_p=0.0), "top_p=0.0"),
    ],
)
def test_validate_rejects_impossible_configs(fields: dict, needle: str) -> None:
    with pytest.raises(eng.EngineConfigError) as info:
        eng.validate(eng.EngineConfig(**fields))
    assert needle in str(info.value)
    assert info.value.hint


def test_default_config_is_the_upstream_shape() -> None:
    config = eng.validate(eng.EngineConfig())
    assert (config.vocab_size, config.batch, config.max_num_reqs) == (256000, 64, 64)
    assert config.num_reqs_paddings == (8, 16, 32, 64)
    assert config.padded_num_reqs == 64
    assert eng.EngineConfig(max_num_reqs=48, batch=20).num_reqs_paddings == (8, 16, 32, 48)
    assert eng.EngineConfig(max_num_reqs=48, batch=20).padded_num_reqs == 32


def test_recompilation_flag_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLO_DOCTOR_CHECK_RECOMPILATION", "1")
    assert eng.EngineConfig().check_recompilation is True
    monkeypatch.setenv("HLO_DOCTOR_CHECK_RECOMPILATION", "0")
    assert eng.EngineConfig().check_recompilation is False


# -- the precompiled menu: hit on f32, miss on bf16 --------------------------------------------

def test_menu_covers_every_bucket_and_sampling_combination(warm_runner: eng.ModelRunner) -> None:
    keys = {(e.name, e.key) for e in warm_runner.compilation_manager.menu}
    for num_reqs in (8, 16):
        for do_sampling in (False, True):
            for logprobs in (False, True):
                key = (("do_sampling", do_sampling), ("logprobs", logprobs), ("num_reqs", num_reqs))
                assert ("sample", key) in keys
        for name in ("prefill", "decode", "compute_logits", "gather_logprobs", "logits_cast"):
            assert (name, (("num_reqs", num_reqs),)) in keys
    assert len(warm_runner.compilation_manager.menu) == warm_runner.compilation_manager.menu_size


def test_precompile_reports_programs_done_of_total(
        greedy_run: tuple[eng.BatchResult, list[tuple[str, int, int]]]) -> None:
    _, calls = greedy_run
    precompile = [(done, total) for stage, done, total in calls if stage == "precompile"]
    total = 9 * 2 + 1  # 9 programs for each of the buckets 8 and 16, and the rng split
    assert precompile == [(done, total) for done in range(total + 1)]
    # All of it inside the warm-up stage, before the batch.
    first = calls.index(("precompile", 0, total))
    last = calls.index(("precompile", total, total))
    assert calls.index(("warmup", 0, 1)) < first < last < calls.index(("warmup", 1, 1))


def test_sample_hits_the_menu_with_f32_and_misses_with_bf16(warm_runner: eng.ModelRunner) -> None:
    rng = warm_runner.rng_params_for_sampling
    meta = TPUSupportedSamplingMetadata(do_sampling=False, logprobs=False)
    logits_bf16 = jax.device_put(np.linspace(-1, 1, 16 * 2048, dtype=np.float32).reshape(16, 2048)
                                 .astype(jnp.bfloat16))
    logits_f32 = logits_bf16.astype(jnp.float32)  # the runner's eager widening (warmed in the menu)

    with CompileWatch() as hit:
        jax.block_until_ready(sample(rng, None, logits_f32, meta))
    assert hit.compiles() == []

    with CompileWatch() as miss:
        jax.block_until_ready(sample(rng, None, logits_bf16, meta))
    assert [e.fun_name for e in miss.compiles()] == ["jit(sample)"]
    (reason,) = miss.reasons()
    assert "now bf16[16,2048]" in reason and "before f32[16,2048]" in reason


def test_forbid_compile_raises_on_a_menu_miss(warm_runner: eng.ModelRunner) -> None:
    rng = warm_runner.rng_params_for_sampling
    meta = TPUSupportedSamplingMetadata(do_sampling=False, logprobs=True)
    with ForbidCompile():
        jax.block_until_ready(sample(rng, None, jnp.ones((8, 2048), jnp.float32), meta))
    with pytest.raises(RecompilationError, match=r"jit\(sample\)"), ForbidCompile():
        # A bucket size that is not in the menu.
        jax.block_until_ready(sample(rng, None, jnp.ones((12, 2048), jnp.float32), meta))


# -- the sampler -------------------------------------------------------------------------------

def test_greedy_tokens_are_the_argmax_of_the_bf16_logits(warm_runner: eng.ModelRunner) -> None:
    hidden = jax.device_put(np.random.default_rng(1).standard_normal((16, 64), dtype=np.float32)
                            .astype(jnp.bfloat16))
    logits = warm_runner.compute_logits_fn(warm_runner.state, hidden)
    assert logits.dtype == jnp.bfloat16
    out = warm_runner._sample_from_logits(logits, TPUSupportedSamplingMetadata())
    np.testing.assert_array_equal(np.asarray(out.next_tokens),
                                  np.argmax(np.asarray(logits.astype(jnp.float32)), axis=-1))
    assert out.logprobs is None


def test_sampling_with_top_k_1_is_greedy(warm_runner: eng.ModelRunner) -> None:
    logits = jax.device_put(np.random.default_rng(2).standard_normal((16, 2048), dtype=np.float32))
    meta = TPUSupportedSamplingMetadata.from_params(16, do_sampling=True, logprobs=False, temperature=1.0,
                                                    top_k=1, top_p=1.0)
    tokens, processed = sample(jax.random.PRNGKey(3), None, logits, meta)
    np.testing.assert_array_equal(np.asarray(tokens), np.argmax(np.asarray(logits), axis=-1))
    assert int(np.sum(np.asarray(processed) > -1e11)) == 16


def test_topk_and_topp_masks_match_numpy() -> None:
    x = np.random.default_rng(4).standard_normal((3, 50)).astype(np.float32)
    ks = np.array([1, 5, 50], dtype=np.int32)
    kept = np.asarray(topk_mask(jnp.asarray(x), jnp.asarray(ks))) > -1e11
    for row, k in enumerate(ks):
        assert set(np.flatnonzero(kept[row])) == set(np.argsort(-x[row])[:k])
    ps = np.array([0.1, 0.5, 0.9], dtype=np.float32)
    kept = np.asarray(topp_mask(jnp.asarray(x), jnp.asarray(ps))) > -1e11
    probs = np.exp(x - x.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    for row, p in enumerate(ps):
        order = np.argsort(-probs[row])
        need = int(np.searchsorted(np.cumsum(probs[row][order]), p) + 1)
        assert set(np.flatnonzero(kept[row])) == set(order[:need])


def test_logprobs_gather_the_sampled_token_and_the_top_k() -> None:
    logits = np.random.default_rng(5).standard_normal((4, 100)).astype(np.float32)
    tokens = np.array([3, 50, 99, 0], dtype=np.int32)
    out = compute_and_gather_logprobs(jnp.asarray(logits), jnp.asarray(tokens), 5)
    ref = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(out.logprobs)[:, 0], ref[np.arange(4), tokens], rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(out.logprob_token_ids)[:, 0], tokens)
    np.testing.assert_array_equal(np.asarray(out.logprob_token_ids)[:, 1], ref.argmax(-1))
    ranks = (ref > ref[np.arange(4), tokens][:, None]).sum(-1) + 1
    np.testing.assert_array_equal(np.asarray(out.selected_token_ranks), ranks)


# -- the offline batch driver ------------------------------------------------------------------

def test_offline_batch_reports_figures_and_no_compiles(greedy_result: eng.BatchResult) -> None:
    r = greedy_result
    assert r.tokens.shape == (16, 6) and r.tokens.dtype == np.int32
    assert ((r.tokens >= 0) & (r.tokens < 2048)).all()
    assert r.logprobs is None
    assert len(r.step_times_ms) == 5
    assert r.throughput_tok_s > 0 and r.batch_ttft_ms > 0 and r.tpot_ms > 0 and r.warmup_s > 0
    assert r.steady_state_compiles == 0, r.compile_reasons
    # The random model still generates varied text (not one token repeated).
    assert len(set(r.tokens[0].tolist())) > 1
    summary = r.summary()
    assert summary["tokens_shape"] == [16, 6] and len(summary["tokens_sha256"]) == 64


def test_greedy_decoding_is_deterministic_and_padding_free(greedy_result: eng.BatchResult) -> None:
    again = eng.run_offline_batch(eng.EngineConfig(**{**SMALL, "batch": 11}))
    assert again.steady_state_compiles == 0, again.compile_reasons
    # Same seed, same bucket (16): the first 11 requests generate exactly the same tokens.
    np.testing.assert_array_equal(again.tokens, greedy_result.tokens[:11])


def test_sampling_with_logprobs_runs_without_compiles() -> None:
    config = eng.EngineConfig(**{**SMALL, "batch": 8, "max_num_reqs": 8, "max_tokens": 3, "do_sampling": True,
                                 "logprobs": True, "check_recompilation": True})
    r = eng.run_offline_batch(config)
    assert r.steady_state_compiles == 0, r.compile_reasons
    assert r.logprobs is not None and r.logprobs.shape == (8, 3)
    assert (r.logprobs <= 0).all() and np.isfinite(r.logprobs).all()


def test_step_target_decodes_in_a_ring_without_compiles() -> None:
    config = eng.EngineConfig(**{**SMALL, "batch": 8, "max_num_reqs": 8, "max_tokens": 2})
    target = eng.profile_target(config)
    target.warmup()
    with CompileWatch() as watch:
        # More steps than the KV cache has slots: positions wrap after the prompt.
        for _ in range(4):
            out = target.step()
        jax.block_until_ready(out.next_tokens)
    assert watch.compiles() == []
    assert out.next_tokens.shape == (8,)
    info = target.describe()
    assert info["config"]["batch"] == 8 and info["precompiled_programs"] > 0


# -- the three ops of the upstream report --------------------------------------------------------

def test_sample_hlo_has_the_copy_and_the_f32_argmax_at_the_default_shape() -> None:
    meta = TPUSupportedSamplingMetadata(do_sampling=False, logprobs=False)
    logits = jax.ShapeDtypeStruct((64, 256000), jnp.float32)
    module = parse_module(sample.lower(jax.random.PRNGKey(0), None, logits, meta).compile().as_text())

    # The greedy branch returns its input: an input-aliasing copy, same layout on both sides,
    # of an entry parameter, feeding the ROOT tuple.
    (copy,) = [i for i in module.entry_instructions() if i.opcode == "copy"]
    (source,) = module.operands_of(copy)
    assert copy.shape.text() == "f32[64,256000]{1,0}" == source.shape.text()
    assert source.opcode == "parameter" and module.is_live_out(copy)

    # The argmax (a variadic reduce, fused or not) reads the widened f32 logits.
    argmax = [i for i in module.entry_instructions()
              if i.opcode in ("reduce", "fusion") and i.shape.is_tuple
              and [e.dtype for e in i.shape.elements] == ["f32", "s32"]]
    assert argmax, "no argmax reduce in jit(sample)"
    assert [o.shape.text() for o in module.operands_of(argmax[0])][0] == "f32[64,256000]{1,0}"


def test_decode_trace_shows_convert_copy_and_argmax(tmp_path: Path) -> None:
    config = eng.EngineConfig(**{**SMALL, "batch": 8, "max_num_reqs": 8})
    target = eng.profile_target(config)
    target.warmup()
    with jax.profiler.trace(str(tmp_path)):
        for i in range(2):
            with jax.profiler.StepTraceAnnotation("decode", step_num=i):
                jax.block_until_ready(target.step().next_tokens)
    (xplane,) = tmp_path.glob("plugins/profile/*/*.xplane.pb")
    seen: set[tuple[str, str]] = set()
    for plane in jax.profiler.ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                if "hlo_module" in stats and "hlo_op" in stats:
                    seen.add((str(stats["hlo_module"]), str(stats["hlo_op"])))
    modules = {m for m, _ in seen}
    assert {"jit_decode_forward", "jit_compute_logits", "jit_convert_element_type", "jit_sample"} <= modules
    assert ("jit_sample", "copy") in seen
    assert any(m == "jit_convert_element_type" and "convert" in op for m, op in seen)
    assert any(m == "jit_sample" and "reduce" in op for m, op in seen)
