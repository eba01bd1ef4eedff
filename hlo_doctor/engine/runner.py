"""The model runner: forward passes, then ``_sample_from_logits`` exactly as the serving stack does it.

``_sample_from_logits`` is a plain method. In its non-speculative branch it widens the logits to
float32 eagerly (a program of its own, ``jit(convert_element_type)``) and then calls the jitted
``sample`` inside the recompilation guard; after both branches it widens again for the logprobs
consumers.
"""

from __future__ import annotations

import contextlib
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .compilation_manager import CompilationManager, Progress
from .config import EngineConfig
from .model import (
    KVCaches,
    ModelDims,
    Params,
    compute_logits,
    decode_forward,
    init_kv_caches,
    init_params,
    prefill_forward,
)
from .recompilation import ForbidCompile
from .sampling import LogprobsTensors, compute_and_gather_logprobs, sample
from .sampling_metadata import TPUSupportedSamplingMetadata


class SamplerOutput(NamedTuple):
    """What one step hands back: next tokens ``int32[padded_num_reqs]`` and, if asked for, logprobs."""

    next_tokens: jax.Array
    logprobs: LogprobsTensors | None


class ModelRunner:
    """Holds the parameters, the KV cache and the jitted programs of one engine instance."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        # One device, no sharding: ``sample`` takes the mesh as a static argument and accepts None.
        self.mesh = None
        self.dims = ModelDims(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            num_kv_heads=config.num_kv_heads,
            head_dim=config.head_dim,
            mlp_dim=config.mlp_dim,
        )
        self.dtype = self.dims.dtype
        self.vocab_size = config.vocab_size
        self.max_num_reqs = config.max_num_reqs
        self.num_reqs_paddings = list(config.num_reqs_paddings)
        self.max_model_len = config.max_model_len
        self.max_logprobs = config.max_logprobs
        self.logprobs_mode = "raw_logprobs"
        self.rng_params_for_sampling = jax.random.PRNGKey(config.seed)
        self.maybe_forbid_compile: contextlib.AbstractContextManager[object] = (
            ForbidCompile() if config.check_recompilation else contextlib.nullcontext()
        )
        # The KV cache is donated: each step updates it in place.
        self.prefill_fn = jax.jit(functools.partial(prefill_forward, dims=self.dims), donate_argnums=(1,))
        self.model_fn = jax.jit(functools.partial(decode_forward, dims=self.dims), donate_argnums=(1,))
        self.compute_logits_fn = jax.jit(compute_logits)
        self.state: Params | None = None
        self.kv_caches: KVCaches | None = None
        self.compilation_manager = CompilationManager(self)

    # -- set-up --------------------------------------------------------------------------------

    def load_model(self) -> None:
        """Generate the seeded bf16 parameters."""
        self.state = init_params(self.dims, self.config.seed)
        jax.block_until_ready(self.state)

    def initialize_kv_cache(self, num_reqs: int) -> None:
        """Fresh (zeroed) caches for ``num_reqs`` padded requests."""
        self.kv_caches = init_kv_caches(self.dims, num_reqs, self.max_model_len)

    def capture_model(self, progress: Progress | None = None) -> None:
        """Build the precompiled menu (AOT compile + warm call of every program and bucket), reporting to ``progress``."""
        self.compilation_manager.capture_reporting(progress)

    def get_padded_num_reqs(self, num_reqs: int) -> int:
        """The smallest bucket holding ``num_reqs`` requests."""
        for bucket in self.num_reqs_paddings:
            if bucket >= num_reqs:
                return bucket
        raise ValueError(f"{num_reqs} requests exceed max_num_reqs={self.max_num_reqs}")

    def sampling_metadata(self, padded_num_reqs: int) -> TPUSupportedSamplingMetadata:
        """This engine's sampling parameters for a padded batch."""
        return TPUSupportedSamplingMetadata.from_params(
            padded_num_reqs,
            do_sampling=self.config.do_sampling,
            logprobs=self.config.logprobs,
            temperature=self.config.temperature,
            top_k=self.config.top_k,
            top_p=self.config.top_p,
        )

    # -- steps ---------------------------------------------------------------------------------

    def execute_prefill(
        self, input_ids: np.ndarray, tpu_sampling_metadata: TPUSupportedSamplingMetadata
    ) -> SamplerOutput:
        """Prefill padded prompts ``int32[padded_num_reqs, prompt_len]`` and sample the first token."""
        assert self.state is not None and self.kv_caches is not None, "load_model / initialize_kv_cache first"
        self.kv_caches, hidden_states = self.prefill_fn(
            self.state, self.kv_caches, jax.device_put(np.asarray(input_ids, dtype=np.int32))
        )
        logits = self.compute_logits_fn(self.state, hidden_states)
        return self._sample_from_logits(logits, tpu_sampling_metadata)

    def execute_decode(
        self, input_ids: jax.Array, position: int, tpu_sampling_metadata: TPUSupportedSamplingMetadata
    ) -> SamplerOutput:
        """One decode step: the previous tokens ``int32[padded_num_reqs]`` at cache slot ``position``."""
        assert self.state is not None and self.kv_caches is not None, "load_model / initialize_kv_cache first"
        self.kv_caches, hidden_states = self.model_fn(
            self.state, self.kv_caches, input_ids, jax.device_put(np.int32(position))
        )
        logits = self.compute_logits_fn(self.state, hidden_states)
        return self._sample_from_logits(logits, tpu_sampling_metadata)

    def _sample_from_logits(
        self,
        logits: jax.Array,
        tpu_sampling_metadata: TPUSupportedSamplingMetadata,
        spec_decode_metadata: None = None,
    ) -> SamplerOutput:
        """Sample next tokens from the model's logits; gather logprobs when the batch wants them."""
        if tpu_sampling_metadata.do_sampling:
            self.rng_params_for_sampling, step_rng = jax.random.split(self.rng_params_for_sampling)
        else:
            step_rng = self.rng_params_for_sampling

        if spec_decode_metadata is None:
            logits = logits.astype(jnp.float32)
            with self.maybe_forbid_compile:
                next_tokens, processed_logits = sample(
                    step_rng,
                    self.mesh,
                    logits,
                    tpu_sampling_metadata,
                )
        else:
            raise ValueError("the reference engine does not implement speculative decoding")

        logits = logits.astype(jnp.float32)
        with self.maybe_forbid_compile:
            if tpu_sampling_metadata.logprobs:
                logprobs_logits = processed_logits if self.logprobs_mode == "processed_logprobs" else logits
                logprobs = compute_and_gather_logprobs(logprobs_logits, next_tokens, self.max_logprobs)
            else:
                logprobs = None
        return SamplerOutput(next_tokens, logprobs)
