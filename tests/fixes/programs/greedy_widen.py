"""Greedy sampling after an eager widening: ``logits.astype(jnp.float32)`` outside jit (HD003, HD001).

``greedy`` hands the widened logits to a jitted sampler that only argmaxes them; ``greedy_logits``
to one that also returns them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

BATCH, VOCAB = 16, 2048


@jax.jit
def sample(logits: jax.Array) -> jax.Array:
    return jnp.argmax(logits, axis=-1)


@jax.jit
def sample_with_logits(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jnp.argmax(logits, axis=-1), logits


def inputs(seed: int) -> jax.Array:
    """bf16 logits with ties and a NaN in them, as a model in bf16 gives."""
    x = jax.random.normal(jax.random.key(seed), (BATCH, VOCAB), jnp.float32)
    x = x.at[0, 7].set(x[0].max()).at[0, 9].set(x[0].max()).at[1, 3].set(jnp.nan)
    return x.astype(jnp.bfloat16)


def greedy(logits: jax.Array) -> jax.Array:
    logits = logits.astype(jnp.float32)
    return sample(logits)


def greedy_logits(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    return sample_with_logits(logits.astype(jnp.float32))


def outputs(seed: int) -> tuple[jax.Array, ...]:
    """What both samplers return for ``seed``."""
    logits = inputs(seed)
    return (greedy(logits), *greedy_logits(logits))
