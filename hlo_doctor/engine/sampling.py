"""The jitted sampler and the logprobs consumer.

``sample`` computes the greedy argmax first, then widens the logits to float32; its greedy branch
returns those logits as they are. ``compute_and_gather_logprobs`` is the consumer that needs f32.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .sampling_metadata import SAMPLING_EPS, TPUSupportedSamplingMetadata

# What masked-out vocabulary entries become: finite, so that processed logprobs stay finite.
_MASKED_LOGIT = -1e12
# Bisection over the 32-bit ordered keys of float32 values converges exactly in 32 rounds.
_BISECTION_ROUNDS = 32


class LogprobsTensors(NamedTuple):
    """Logprobs of one step: the sampled token first, then the top ``max_logprobs``."""

    logprob_token_ids: jax.Array
    """int32 ``[num_reqs, max_logprobs + 1]``."""
    logprobs: jax.Array
    """float32 ``[num_reqs, max_logprobs + 1]``."""
    selected_token_ranks: jax.Array
    """int32 ``[num_reqs]``: 1 + how many entries beat the sampled token."""


def _ordered_key(x: jax.Array) -> jax.Array:
    """int32 keys that order like the float32 values (NaN aside): thresholds become exact."""
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)
    return jnp.where(bits >= 0, bits, bits ^ jnp.int32(0x7FFFFFFF))


def _largest_key_with(keys: jax.Array, enough) -> jax.Array:
    """Per row, the largest key ``t`` with ``enough(keys >= t)`` true (``enough`` is monotone)."""
    lo = jnp.min(keys, axis=-1)
    hi = jnp.max(keys, axis=-1) + 1

    def body(_: int, bounds: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        lo, hi = bounds
        # floor((lo + hi) / 2) without int32 overflow.
        mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)
        ok = enough(keys >= mid[:, None])
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo, _ = jax.lax.fori_loop(0, _BISECTION_ROUNDS, body, (lo, hi))
    return lo


def topk_mask(logits: jax.Array, top_k: jax.Array) -> jax.Array:
    """Keep each row's ``top_k`` largest logits (ties at the threshold kept); mask the rest."""
    keys = _ordered_key(logits)
    threshold = _largest_key_with(keys, lambda kept: jnp.sum(kept, axis=-1) >= top_k)
    return jnp.where(keys >= threshold[:, None], logits, _MASKED_LOGIT)


def topp_mask(logits: jax.Array, top_p: jax.Array) -> jax.Array:
    """Keep the smallest set of most likely tokens whose probability reaches ``top_p``."""
    probs = jax.nn.softmax(logits, axis=-1)
    keys = _ordered_key(probs)
    threshold = _largest_key_with(
        keys, lambda kept: jnp.sum(jnp.where(kept, probs, 0.0), axis=-1) >= top_p
    )
    return jnp.where(keys >= threshold[:, None], logits, _MASKED_LOGIT)


def _apply_sampling_transforms(
    logits: jax.Array, tpu_sampling_metadata: TPUSupportedSamplingMetadata
) -> jax.Array:
    """Temperature, then top-k (where k > 0), then top-p (where p < 1), on float32 logits."""
    assert tpu_sampling_metadata.temperature is not None
    assert tpu_sampling_metadata.top_k is not None
    assert tpu_sampling_metadata.top_p is not None
    temperatures = jnp.expand_dims(tpu_sampling_metadata.temperature.astype(logits.dtype), axis=-1)
    logits = logits / temperatures

    top_k = tpu_sampling_metadata.top_k
    logits = jnp.where(jnp.expand_dims(top_k > 0, axis=-1), topk_mask(logits, top_k), logits)

    top_p = tpu_sampling_metadata.top_p
    logits = jnp.where(jnp.expand_dims(top_p < 1.0, axis=-1), topp_mask(logits, top_p), logits)
    return logits


@functools.partial(jax.jit, static_argnames=["mesh"])
def sample(
    rng: jax.Array,
    mesh: Mesh | None,
    logits: jax.Array,
    tpu_sampling_metadata: TPUSupportedSamplingMetadata,
) -> tuple[jax.Array, jax.Array]:
    """Next tokens ``int32[B]`` and the (processed) logits ``f32[B, V]`` of one step."""
    if tpu_sampling_metadata.do_sampling and mesh is not None:
        # The sampling transforms need whole rows: keep the vocabulary dimension unsharded.
        logits = jax.lax.with_sharding_constraint(logits, NamedSharding(mesh, P(None, None)))

    greedy_tokens = jnp.argmax(logits, axis=-1)
    logits = logits.astype(jnp.float32)
    if not tpu_sampling_metadata.do_sampling:
        ret_tokens = greedy_tokens
        ret_logits = logits
    else:
        processed_logits = _apply_sampling_transforms(logits, tpu_sampling_metadata)
        next_tokens = jax.random.categorical(rng, processed_logits).astype(greedy_tokens.dtype)
        assert tpu_sampling_metadata.temperature is not None
        # A temperature of (about) zero means greedy for that request.
        is_greedy = tpu_sampling_metadata.temperature < SAMPLING_EPS
        ret_tokens = jnp.where(is_greedy, greedy_tokens, next_tokens)
        ret_logits = jnp.where(jnp.expand_dims(is_greedy, axis=-1), logits, processed_logits)
    next_tokens = ret_tokens
    if mesh is not None:
        next_tokens = jax.lax.with_sharding_constraint(next_tokens, NamedSharding(mesh, P()))
    return next_tokens, ret_logits


def compute_logprobs(logits: jax.Array) -> jax.Array:
    """Log-softmax over the vocabulary."""
    return jax.nn.log_softmax(logits, axis=-1)


def gather_logprobs(logprobs: jax.Array, token_ids: jax.Array, num_logprobs: int) -> LogprobsTensors:
    """The sampled token's logprob and rank, and the top ``num_logprobs`` entries of each row."""
    topk_logprobs, topk_indices = jax.lax.top_k(logprobs, k=num_logprobs)
    token_ids = jnp.expand_dims(token_ids, axis=-1)
    token_logprobs = jnp.take_along_axis(logprobs, token_ids, axis=-1)
    token_ranks = jnp.sum(logprobs > token_logprobs, axis=-1).astype(jnp.int32) + 1
    indices = jnp.concatenate((token_ids, topk_indices), axis=1).astype(jnp.int32)
    values = jnp.concatenate((token_logprobs, topk_logprobs), axis=1)
    return LogprobsTensors(indices, values, token_ranks)


@functools.partial(jax.jit, static_argnames=("max_logprobs",))
def compute_and_gather_logprobs(logits: jax.Array, next_tokens: jax.Array, max_logprobs: int) -> LogprobsTensors:
    """float32 logprobs of the sampled tokens plus the top ``max_logprobs`` per request."""
    logprobs = compute_logprobs(logits)
    return gather_logprobs(logprobs, next_tokens, max_logprobs)
