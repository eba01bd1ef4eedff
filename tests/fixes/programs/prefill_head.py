"""A prefill that applies the LM head to every prompt position and keeps the last (HD012)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

BATCH, POSITIONS, HIDDEN, VOCAB = 4, 16, 128, 8000


@jax.jit
def prefill(h: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits = h @ w
    return jnp.argmax(logits[:, -1], axis=-1), logits[:, -1]


def outputs(seed: int) -> tuple[jax.Array, ...]:
    """The first token and the last position's logits for ``seed``."""
    key = jax.random.key(seed)
    h = jax.random.normal(key, (BATCH, POSITIONS, HIDDEN), jnp.float32)
    w = jax.random.normal(jax.random.fold_in(key, 1), (HIDDEN, VOCAB), jnp.float32) * 0.05
    return prefill(h, w)
