"""A decode step given bf16 weights that widens them to f32 (and reads the table transposed) on every
call (HD014): the same converts each call, for weights that never change."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

VOCAB, WIDTH, BATCH = 2048, 128, 8
PARAMS = {"emb": jax.random.normal(jax.random.PRNGKey(1), (VOCAB, WIDTH), jnp.bfloat16),
          "w": jax.random.normal(jax.random.PRNGKey(2), (WIDTH, WIDTH), jnp.bfloat16)}


@jax.jit
def decode(params: Any, x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w"].astype(jnp.float32))
    logits = h @ params["emb"].T.astype(jnp.float32)
    return jnp.argmax(logits, -1), logits


X0 = jax.random.normal(jax.random.key(100), (BATCH, WIDTH), jnp.float32)


def step() -> tuple[jax.Array, jax.Array]:
    """One decode step on the model's weights (a profile and verify target)."""
    return decode(PARAMS, X0)


def outputs(seed: int) -> tuple[jax.Array, ...]:
    """The tokens and logits of ``seed``'s activations."""
    return decode(PARAMS, jax.random.normal(jax.random.key(seed), (BATCH, WIDTH), jnp.float32))
