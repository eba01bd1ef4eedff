"""A prefill that applies the LM head to every prompt position and keeps only the last one.

``step`` computes ``(h @ W)[:, -1]`` then its argmax: the matmul writes logits for all 16 positions
and the slice, fused into the argmax, reads one of them (15/16 of the matmul thrown away).
``step_fixed`` slices first (``h[:, -1:] @ W``). ``step_half`` keeps half of the positions (at the
rule's threshold) and ``step_all`` returns every position's logits: nothing is discarded there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

BATCH, POSITIONS, HIDDEN, VOCAB = 4, 16, 128, 32000


@jax.jit
def prefill(h: jax.Array, w: jax.Array) -> jax.Array:
    logits = h @ w
    return jnp.argmax(logits[:, -1], axis=-1)


@jax.jit
def prefill_fixed(h: jax.Array, w: jax.Array) -> jax.Array:
    logits = h[:, -1:] @ w
    return jnp.argmax(logits[:, 0], axis=-1)


@jax.jit
def prefill_half(h: jax.Array, w: jax.Array) -> jax.Array:
    logits = h @ w
    return jnp.argmax(logits[:, POSITIONS // 2:], axis=-1)


@jax.jit
def prefill_all(h: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits = h @ w
    return jnp.argmax(logits[:, -1], axis=-1), logits


_h = jax.random.normal(jax.random.key(0), (BATCH, POSITIONS, HIDDEN), jnp.float32)
_w = jax.random.normal(jax.random.key(1), (HIDDEN, VOCAB), jnp.float32) * 0.05


def step() -> jax.Array:
    """The LM head over every position, then the last position's argmax."""
    return prefill(_h, _w)


def step_fixed() -> jax.Array:
    """The last position sliced before the LM head."""
    return prefill_fixed(_h, _w)


def step_half() -> jax.Array:
    """Half of the positions kept: at the threshold, not flagged."""
    return prefill_half(_h, _w)


def step_all() -> tuple[jax.Array, jax.Array]:
    """Every position's logits returned: nothing discarded."""
    return prefill_all(_h, _w)
