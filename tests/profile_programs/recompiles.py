"""A step that compiles inside the traced window: a jitted function built afresh per call, and an
eager op on an input whose shape changes per call."""

from __future__ import annotations

import jax
import jax.numpy as jnp

CALLS = [0]


def step() -> jax.Array:
    CALLS[0] += 1
    n = 8 + CALLS[0]
    scaled = jax.jit(lambda x: x * 2.0 + 1.0)(jnp.arange(n, dtype=jnp.float32))
    return jnp.sin(scaled)
