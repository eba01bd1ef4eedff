"""A greedy sampler step shaped like the seed issue, small: an eager widening convert, then a jitted
sample() whose greedy branch returns its f32 input (so XLA inserts a copy)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

BATCH, VOCAB = 32, 2048
_logits = jax.random.normal(jax.random.key(0), (BATCH, VOCAB), jnp.float32).astype(jnp.bfloat16)


@jax.jit
def sample(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jnp.argmax(logits, axis=-1), logits


def step() -> tuple[jax.Array, jax.Array]:
    return sample(_logits.astype(jnp.float32))
