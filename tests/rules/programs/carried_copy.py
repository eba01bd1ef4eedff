"""A token loop that reads its carried cache and writes it in the same iteration.

``decode`` keeps the previous step's cache next to the current one: the loop carries
``(cache, previous)`` and returns ``(update(cache), cache)``, so the old cache must survive the
in-place update and XLA copies the carried buffer inside the ``while`` body on every iteration.
``decode_fixed`` carries the cache alone and only writes it: no copy in the body.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

SEQ, DIM, TOKENS = 256, 128, 16


def _write(cache: jax.Array, i: jax.Array) -> jax.Array:
    row = jnp.full((1, DIM), i, cache.dtype)
    return jax.lax.dynamic_update_slice(cache, row, (i, 0))


@jax.jit
def decode(cache: jax.Array) -> tuple[jax.Array, jax.Array]:
    def body(carry: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        i, cache, _previous = carry
        return i + 1, _write(cache, i), cache
    _, cache, previous = jax.lax.while_loop(lambda c: c[0] < TOKENS, body, (jnp.int32(0), cache, cache))
    return cache, previous


@jax.jit
def decode_fixed(cache: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(0, TOKENS, lambda i, c: _write(c, i), cache)


_cache = jnp.zeros((SEQ, DIM), jnp.float32)


def step() -> tuple[jax.Array, jax.Array]:
    """One call of the loop that copies its carried cache each iteration."""
    return decode(_cache)


def step_fixed() -> jax.Array:
    """The loop that only writes its cache: no copy in the body."""
    return decode_fixed(_cache)
