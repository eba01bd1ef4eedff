"""A projection that casts its input to the compute dtype and straight back (HD007): weights and
activations that were stored in bf16 and loaded as f32, cast to bf16 and back to f32 before the
matmul, two converts of work for the same values."""

from __future__ import annotations

import jax
import jax.numpy as jnp

ROWS, WIDTH, OUT = 64, 512, 256


@jax.jit
def project(x: jax.Array, w: jax.Array) -> jax.Array:
    h = x.astype(jnp.bfloat16).astype(jnp.float32)
    return h @ w


def outputs(seed: int, *, stored: jnp.dtype = jnp.bfloat16) -> tuple[jax.Array, ...]:
    """The projection of ``seed``'s input, drawn in ``stored`` (bf16: a bf16 checkpoint) and loaded as f32."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(k1, (ROWS, WIDTH), stored).astype(jnp.float32)
    w = jax.random.normal(k2, (WIDTH, OUT), jnp.float32)
    return (project(x, w),)


X0, W0 = (jax.random.normal(jax.random.key(100), (ROWS, WIDTH), jnp.bfloat16).astype(jnp.float32),
          jax.random.normal(jax.random.key(101), (WIDTH, OUT), jnp.float32))


def step() -> jax.Array:
    """One projection of a bf16-born input (a profile and verify target)."""
    return project(X0, W0)
