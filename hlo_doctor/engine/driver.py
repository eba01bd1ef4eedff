"""The two ways the rest of hlo-doctor drives the engine: a step target and an offline batch.

* :func:`profile_target` -> :class:`StepTarget`: ``warmup()`` once, then ``step()`` per decode step.
* :func:`run_offline_batch` -> :class:`BatchResult`: start cold, prefill a batch, decode
  ``max_tokens`` tokens, and report throughput, batch TTFT, TPOT and the compiles seen after warm-up.
* :class:`OfflineEngine`: ``warmup()`` once, then ``run_batch()`` per batch (what A/B rounds use).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from .config import EngineConfig, validate
from .recompilation import CompileWatch
from .runner import ModelRunner, SamplerOutput
from .sampling import compute_and_gather_logprobs, sample
from .sampling_metadata import TPUSupportedSamplingMetadata

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: stage ``warmup``, ``precompile`` (menu programs), ``prefill``, ``decode``."""


def make_prompts(config: EngineConfig) -> np.ndarray:
    """Seeded prompt token ids ``int32[batch, prompt_len]``."""
    rng = np.random.default_rng(config.seed)
    return rng.integers(0, config.vocab_size, size=(config.batch, config.prompt_len), dtype=np.int32)


def _pad_rows(array: np.ndarray, rows: int) -> np.ndarray:
    """Pad the leading dimension to ``rows`` with zeros (padding requests of token 0)."""
    if array.shape[0] == rows:
        return array
    pad = np.zeros((rows - array.shape[0], *array.shape[1:]), dtype=array.dtype)
    return np.concatenate([array, pad])


def _clear_sampler_caches() -> None:
    """Forget every compiled ``sample``/``compute_and_gather_logprobs`` program of this engine tree.

    These module-level jitted functions keep their caches for the life of the process, so without
    this a second engine in the same process would be served by the first one's programs.
    """
    for jitted in (sample, compute_and_gather_logprobs):
        jitted.clear_cache()  # type: ignore[attr-defined]


def _warm_runner(config: EngineConfig, progress: Progress | None = None) -> ModelRunner:
    """A runner as after an engine start: parameters, the precompiled menu, an empty KV cache."""
    runner = ModelRunner(config)
    runner.load_model()
    runner.capture_model(progress)
    runner.initialize_kv_cache(config.padded_num_reqs)
    return runner


def describe_engine(config: EngineConfig, runner: ModelRunner | None = None) -> dict[str, Any]:
    """What is being run, for run metadata: engine source, config, backend, program menu."""
    info: dict[str, Any] = {
        "engine": "hlo-doctor reference decode engine",
        "source": str(Path(__file__).resolve().parent),
        "config": dataclasses.asdict(config),
        "padded_num_reqs": config.padded_num_reqs,
        "num_reqs_paddings": list(config.num_reqs_paddings),
        "step": "decode_forward -> compute_logits -> _sample_from_logits (convert_element_type, sample)",
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "jax_version": jax.__version__,
    }
    if runner is not None and runner.state is not None:
        info["num_params"] = int(sum(x.size for x in jax.tree_util.tree_leaves(runner.state)))
        info["precompiled_programs"] = len(runner.compilation_manager.menu)
    return info


class StepTarget:
    """The engine as a profiling target: ``warmup()`` then any number of ``step()`` calls.

    ``step()`` runs one decode step of the whole padded batch (forward, logits, sampling) and returns
    the next tokens without waiting for them. Positions run in a ring over the KV cache after the
    prompt, so any number of steps keeps the same shapes and programs.
    """

    def __init__(self, config: EngineConfig) -> None:
        self.config = validate(config)
        self.runner: ModelRunner | None = None
        self._tokens: jax.Array | None = None
        self._position = config.prompt_len
        self._metadata: TPUSupportedSamplingMetadata | None = None

    def warmup(self, progress: Progress | None = None) -> None:
        """Generate parameters, build the precompiled menu (reported to ``progress``), and prefill the batch."""
        runner = _warm_runner(self.config, progress)
        padded = self.config.padded_num_reqs
        metadata = runner.sampling_metadata(padded)
        out = runner.execute_prefill(_pad_rows(make_prompts(self.config), padded), metadata)
        self._metadata = metadata
        self._tokens = jax.block_until_ready(out.next_tokens)
        self._position = self.config.prompt_len
        self.runner = runner

    def step(self) -> SamplerOutput:
        """One decode step; returns JAX arrays (next tokens ``int32[padded_num_reqs]`` and logprobs)."""
        if self.runner is None or self._tokens is None or self._metadata is None:
            raise RuntimeError("call warmup() before step()")
        out = self.runner.execute_decode(self._tokens, self._position, self._metadata)
        self._tokens = out.next_tokens
        self._position += 1
        if self._position >= self.config.max_model_len:
            self._position = self.config.prompt_len
        return out

    def describe(self) -> dict[str, Any]:
        """Run metadata: engine source, config, backend, precompiled menu size."""
        return describe_engine(self.config, self.runner)


def profile_target(config: EngineConfig | None = None) -> StepTarget:
    """A :class:`StepTarget` for ``config`` (default: batch 64 greedy decode, vocab 256000)."""
    return StepTarget(config if config is not None else EngineConfig())


@dataclass(frozen=True, slots=True, eq=False)
class BatchResult:
    """One offline batch: generated tokens and the serving figures.

    "Steady state" is everything after warm-up: the prefill and every decode step. A compile there
    means a call missed the precompiled menu.
    """

    tokens: np.ndarray
    """int32 ``[batch, max_tokens]``: the first from the prefill, the rest from decode steps."""
    logprobs: np.ndarray | None
    """float32 ``[batch, max_tokens]``: each generated token's logprob (``None`` unless config.logprobs)."""
    throughput_tok_s: float
    """Generated tokens over the wall time of prefill plus decode."""
    batch_ttft_ms: float
    """Prefill of the whole batch until the first tokens are on the host."""
    tpot_ms: float
    """Mean decode step time (time per output token of each request)."""
    step_times_ms: tuple[float, ...]
    """Every decode step's wall time, tokens on the host included."""
    steady_state_compiles: int
    """Backend compiles after warm-up (``jax.monitoring``)."""
    compile_reasons: tuple[str, ...]
    """One line per such compile: the program and JAX's cache-miss explanation when it gave one."""
    warmup_s: float
    """Parameter generation plus the precompiled menu."""
    config: EngineConfig | None = None
    """The configuration that ran."""

    def summary(self) -> dict[str, Any]:
        """The figures as plain JSON-able values (tokens as a checksum and the first request's ids)."""
        return {
            "throughput_tok_s": self.throughput_tok_s,
            "batch_ttft_ms": self.batch_ttft_ms,
            "tpot_ms": self.tpot_ms,
            "median_step_ms": float(np.median(self.step_times_ms)) if self.step_times_ms else None,
            "step_times_ms": list(self.step_times_ms),
            "steady_state_compiles": self.steady_state_compiles,
            "compile_reasons": list(self.compile_reasons),
            "warmup_s": self.warmup_s,
            "tokens_shape": list(self.tokens.shape),
            "tokens_sha256": _sha256(self.tokens),
            "first_request_tokens": self.tokens[0].tolist() if self.tokens.size else [],
            "mean_logprob": float(np.mean(self.logprobs)) if self.logprobs is not None else None,
            "config": dataclasses.asdict(self.config) if self.config is not None else None,
        }


def _sha256(array: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


class OfflineEngine:
    """An engine started once (``warmup()``) that serves any number of offline batches (``run_batch()``).

    Each batch starts from an empty KV cache and the seed's sampling key, so batches are
    reproducible; the precompiled menu and the jit caches persist between batches, as in a serving
    process (a menu miss therefore compiles in the first batch only).
    """

    def __init__(self, config: EngineConfig) -> None:
        self.config = validate(config)
        self.runner: ModelRunner | None = None
        self.warmup_s = 0.0
        self._initial_rng: jax.Array | None = None

    def warmup(self, progress: Progress | None = None) -> None:
        """Parameters and the precompiled menu (timed as ``warmup_s``; each program reported to ``progress``)."""
        start = time.perf_counter()
        self.runner = _warm_runner(self.config, progress)
        self._initial_rng = self.runner.rng_params_for_sampling
        self.warmup_s = time.perf_counter() - start

    def run_batch(self, progress: Progress | None = None) -> BatchResult:
        """Prefill ``config.batch`` seeded prompts, decode ``config.max_tokens`` tokens each."""
        if self.runner is None:
            raise RuntimeError("call warmup() before run_batch()")
        runner, config = self.runner, self.config
        report = progress or (lambda stage, done, total: None)
        batch, padded = config.batch, config.padded_num_reqs
        runner.initialize_kv_cache(padded)
        assert self._initial_rng is not None
        runner.rng_params_for_sampling = self._initial_rng
        metadata = runner.sampling_metadata(padded)
        prompts = _pad_rows(make_prompts(config), padded)
        tokens = np.zeros((batch, config.max_tokens), dtype=np.int32)
        logprobs = np.zeros((batch, config.max_tokens), dtype=np.float32) if config.logprobs else None
        step_times: list[float] = []

        def collect(out: SamplerOutput, index: int) -> None:
            tokens[:, index] = np.asarray(out.next_tokens)[:batch]
            if logprobs is not None and out.logprobs is not None:
                logprobs[:, index] = np.asarray(out.logprobs.logprobs)[:batch, 0]

        with CompileWatch() as watch:
            report("prefill", 0, 1)
            t0 = time.perf_counter()
            out = runner.execute_prefill(prompts, metadata)
            collect(out, 0)
            ttft_s = time.perf_counter() - t0
            report("prefill", 1, 1)
            next_input = out.next_tokens
            for index in range(1, config.max_tokens):
                t = time.perf_counter()
                out = runner.execute_decode(next_input, config.prompt_len + index - 1, metadata)
                collect(out, index)
                step_times.append(time.perf_counter() - t)
                next_input = out.next_tokens
                report("decode", index, config.max_tokens - 1)
        total_s = ttft_s + sum(step_times)
        return BatchResult(
            tokens=tokens,
            logprobs=logprobs,
            throughput_tok_s=batch * config.max_tokens / total_s,
            batch_ttft_ms=ttft_s * 1e3,
            tpot_ms=float(np.mean(step_times) * 1e3) if step_times else 0.0,
            step_times_ms=tuple(s * 1e3 for s in step_times),
            steady_state_compiles=len(watch.compiles()),
            compile_reasons=watch.reasons(),
            warmup_s=self.warmup_s,
            config=config,
        )

    def restart_sampler(self) -> None:
        """Start the sampling programs cold, as a freshly started engine serves its first batch.

        Clears this tree's jitted sampler caches and builds the menu's sampler entries for this
        configuration's bucket again (the backbone stays compiled), so a sampler call that misses the
        menu compiles in the next batch every time, not only in the process's first. ``hlo-doctor
        verify`` calls it before each measured round, outside the measured window.
        """
        if self.runner is None:
            raise RuntimeError("call warmup() before restart_sampler()")
        for jitted in (sample, compute_and_gather_logprobs):
            jitted.clear_cache()  # type: ignore[attr-defined]
        runner, manager = self.runner, self.runner.compilation_manager
        buckets, kept = runner.num_reqs_paddings, len(manager.menu)
        runner.num_reqs_paddings = [self.config.padded_num_reqs]
        try:
            manager._precompile_sampling()
            manager._precompile_gather_logprobs()
        finally:
            runner.num_reqs_paddings = buckets
            del manager.menu[kept:]


def run_offline_batch(config: EngineConfig, progress: Progress | None = None) -> BatchResult:
    """Start an engine cold (sampler caches cleared, parameters, precompiled menu) and serve one batch."""
    validate(config)
    report = progress or (lambda stage, done, total: None)
    # Start cold, as a freshly started engine process does: only this run's menu can serve its
    # steps, so a menu miss shows in every run, not only in the process's first.
    _clear_sampler_caches()
    engine = OfflineEngine(config)
    report("warmup", 0, 1)
    engine.warmup(progress)
    report("warmup", 1, 1)
    return engine.run_batch(progress)
