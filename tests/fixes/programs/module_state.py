"""A decode loop keeping its state at module level and rebinding it from the result.

``step()`` runs ``_state = decode(_state)`` and returns ``_state[2]``, which its callers read into an
int at once; ``last_token()`` reads the global again later. Nothing is donated, so XLA copies the cache into the decode loop on every call
(HD009); every read after the call is of the new value, so ``donate-state`` may donate it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

SEQ, DIM, VOCAB, TOKENS = 64, 32, 256, 4
PARAMS = jax.random.normal(jax.random.key(99), (DIM, VOCAB), jnp.float32)


def init(seed: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A random cache for ``seed``, the position and the last token."""
    return jax.random.normal(jax.random.key(seed), (SEQ, DIM), jnp.float32), jnp.int32(0), jnp.int32(0)


def _decode(state: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    def body(i: jax.Array, s: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        cache, pos, _ = s
        token = jnp.argmax(cache[pos % SEQ] @ PARAMS).astype(jnp.int32)
        row = jnp.full((1, DIM), token, jnp.float32) / VOCAB
        return jax.lax.dynamic_update_slice(cache, row, ((pos + 1) % SEQ, 0)), pos + 1, token

    return jax.lax.fori_loop(0, TOKENS, body, state)


decode = jax.jit(_decode)
_state = init(0)


def reset(seed: int) -> None:
    """Start again from a fresh state."""
    global _state
    _state = init(seed)


def step() -> jax.Array:
    """One call of the decode loop: the last token it wrote."""
    global _state
    _state = decode(_state)
    return _state[2]


def last_token() -> int:
    """The last token, read from the global again."""
    return int(_state[2])


def outputs(seed: int) -> tuple[jax.Array, ...]:
    """Three steps' tokens, the last token read again, and the final cache."""
    reset(seed)
    tokens = [int(step()) for _ in range(3)]
    return (*map(jnp.int32, tokens), jnp.int32(last_token()), _state[0])
