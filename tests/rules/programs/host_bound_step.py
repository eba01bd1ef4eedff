"""A host-bound step: two small jitted programs with Python work between them.

``step`` pulls the first program's result to the host and scores it row by row in Python before the
second program runs: the device (XLA:CPU's threads) waits for the Python. ``step_jitted`` does the
same scoring inside one jitted program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

ROWS, WIDTH = 128, 256
_x = jax.random.normal(jax.random.key(0), (ROWS, WIDTH), jnp.float32)
_w = jax.random.normal(jax.random.key(1), (WIDTH, WIDTH), jnp.float32) / WIDTH


@jax.jit
def embed(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w)


@jax.jit
def head(h: jax.Array, bonus: jax.Array) -> jax.Array:
    return jnp.argmax(h + bonus[:, None], axis=-1)


def score_rows(h: jax.Array) -> np.ndarray:
    """A per-row score computed in Python on the host (the work that keeps the device waiting)."""
    rows = np.asarray(h)
    scores = []
    for row in rows:
        best = 0.0
        for value in row.tolist():
            best = max(best, value * value)
        scores.append(best)
    return np.asarray(scores, np.float32)


def step() -> jax.Array:
    h = embed(_x, _w)
    return head(h, jnp.asarray(score_rows(h)))


@jax.jit
def _fused(x: jax.Array, w: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ w)
    return jnp.argmax(h + jnp.max(h * h, axis=-1)[:, None], axis=-1)


def step_jitted() -> jax.Array:
    return _fused(_x, _w)
