"""A decode loop over a stacked per-layer KV cache [layers, batch, positions, dim] that writes each
layer's new row into the layer's slice, puts the stack back together with ``jnp.concatenate`` on
every token (HD013: the whole cache is written where one row per layer changes), and attends over
the updated layer."""

from __future__ import annotations

import jax
import jax.numpy as jnp

LAYERS, BATCH, POSITIONS, DIM, TOKENS = 4, 2, 256, 32, 8


def _step(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    cache, x = carry
    for i in range(LAYERS):
        row = jnp.tanh(x * (i + 1))[:, None, :]
        layer = jax.lax.dynamic_update_slice(cache[i], row, (0, t, 0))
        cache = jnp.concatenate([cache[:i], layer[None], cache[i + 1:]], axis=0)
        scores = jnp.einsum("bpd,bd->bp", layer, x) / DIM
        x = x + jnp.einsum("bp,bpd->bd", jax.nn.softmax(scores, axis=-1), layer)
    return cache, x


@jax.jit
def generate(cache: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.lax.fori_loop(0, TOKENS, _step, (cache, x))


CACHE0 = jax.random.normal(jax.random.key(100), (LAYERS, BATCH, POSITIONS, DIM), jnp.float32)
X0 = jax.random.normal(jax.random.key(101), (BATCH, DIM), jnp.float32)


def step() -> tuple[jax.Array, jax.Array]:
    """One generate() call on a fixed cache and input (a profile and verify target)."""
    return generate(CACHE0, X0)


def outputs(seed: int) -> tuple[jax.Array, ...]:
    """The cache and the state after ``TOKENS`` steps from ``seed``'s cache and input."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    cache = jax.random.normal(k1, (LAYERS, BATCH, POSITIONS, DIM), jnp.float32)
    x = jax.random.normal(k2, (BATCH, DIM), jnp.float32)
    return generate(cache, x)
