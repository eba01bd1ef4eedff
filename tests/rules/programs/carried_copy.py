"""A token loop that keeps the previous step's cache next to the current one.

The loop carries ``(cache, previous)`` and returns ``(update(cache), cache)``: the old cache must
survive the in-place update, so XLA copies the carried buffer inside the ``while`` body on every
iteration. ``step_fixed`` carries only the cache (and what it needs of the previous one, a row),
and the copy goes.
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
    def body(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        cache, _previous = carry
        return _write(cache, i), cache
    return jax.lax.fori_loop(0, TOKENS, body, (cache, cache))


@jax.jit
def decode_fixed(cache: jax.Array) -> tuple[jax.Array, jax.Array]:
    def body(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        cache, _last = carry
        return _write(cache, i), jax.lax.dynamic_slice(cache, (i, 0), (1, DIM))
    return jax.lax.fori_loop(0, TOKENS, body, (cache, cache[:1]))


_cache = jnp.zeros((SEQ, DIM), jnp.float32)


def step() -> tuple[jax.Array, jax.Array]:
    """One call of the loop that copies its carried cache each iteration."""
    return decode(_cache)


def step_fixed() -> tuple[jax.Array, jax.Array]:
    """The same loop carrying one row of the previous cache: no copy in the body."""
    return decode_fixed(_cache)
