"""keras-hub's greedy sampler in one function: ``argmax(softmax(logits / temperature))`` (HD011)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

BATCH, VOCAB = 8, 4096


@jax.jit
def sample(logits: jax.Array, temperature: jax.Array) -> jax.Array:
    probabilities = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    return jnp.argmax(probabilities, axis=-1)


def outputs(seed: int) -> tuple[jax.Array, ...]:
    """The tokens for ``seed``'s logits and temperature."""
    key = jax.random.key(seed)
    logits = jax.random.normal(key, (BATCH, VOCAB), jnp.bfloat16)
    temperature = jnp.float32(0.5 + seed / 4)
    return (sample(logits, temperature),)
