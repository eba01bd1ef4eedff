"""A decode step with two wastes that hlo-doctor's file fixes remove, small enough to profile fast.

``decode`` runs a jitted loop over a KV cache that it does not donate (HD009: the cache is copied
before the loop on every call); ``step`` widens the bf16 logits eagerly before a jitted sampler that
only argmaxes them (HD003 and HD001 on one convert).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

SEQ, HEADS, DIM, BATCH, VOCAB = 64, 4, 32, 8, 4096


@functools.partial(jax.jit, static_argnames=("steps",))
def decode(cache: jax.Array, steps: int) -> jax.Array:
    def body(i: jax.Array, c: jax.Array) -> jax.Array:
        return jax.lax.dynamic_update_slice(c, c[i][None] * 0.5 + 1.0, ((i + 1) % SEQ, 0, 0))

    cache = jax.lax.fori_loop(0, steps, body, cache)
    return cache


@jax.jit
def sample(logits: jax.Array) -> jax.Array:
    return jnp.argmax(logits, axis=-1)


def make(seed: int) -> tuple[jax.Array, jax.Array]:
    """A cache and bf16 logits for ``seed``."""
    key = jax.random.key(seed)
    cache = jax.random.normal(key, (SEQ, HEADS, DIM), jnp.float32)
    logits = jax.random.normal(jax.random.fold_in(key, 1), (BATCH, VOCAB), jnp.bfloat16)
    return cache, logits


_INPUTS = make(0)


def run(cache: jax.Array, logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    cache = decode(cache, 8)
    logits = logits.astype(jnp.float32)
    return sample(logits), cache


def step() -> tuple[jax.Array, jax.Array]:
    """One decode step on a fresh copy of the inputs."""
    cache, logits = _INPUTS
    return run(cache + 0.0, logits)
