"""Decode steps that compile inside a traced window, for the compile accounting tests.

- ``eager_decode``: a greedy decode step run outside ``jit`` on a sequence that grows by one token
  per step: the indexing, concatenate and slicing ops compile one-op programs for each new length
  (eager ops), and the jitted ``attend`` compiles again for each new length (a program compiled on
  every call). Its jnp calls also miss jax's dispatch fast path without compiling while ``attend``
  is traced.
- ``fresh_while``: an eager ``lax.while_loop`` whose body is a closure created per call (as an
  eager ``generate()`` builds it): the loop compiles on every call.
- ``warm_step``: a jitted step called with the shapes it was warmed up with: no compile.
- ``fresh_jit_decode``: a decode loop over a KV cache that is not donated, jitted afresh per call
  (the same program under a new program id each call).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

VOCAB, DIM = 256, 32
_KEY = jax.random.PRNGKey(0)
_EMBED = jax.random.normal(_KEY, (VOCAB, DIM), jnp.float32)
_HEAD = jax.random.normal(jax.random.PRNGKey(1), (DIM, VOCAB), jnp.float32)


@jax.jit
def attend(hs: jax.Array, q: jax.Array) -> jax.Array:
    """Attention of the last position over the whole (growing) sequence."""
    scores = jnp.tanh(hs @ q) * 2.0
    return jax.nn.softmax(scores) @ hs


_ids = [jnp.zeros((1,), jnp.int32)]


def eager_decode() -> jax.Array:
    """One greedy decode step outside jit, on a sequence one token longer than the last."""
    ids = _ids[0]
    hs = _EMBED[ids]
    ctx = attend(hs, hs[-1])
    logits = (ctx @ _HEAD) / 0.7
    nxt = jnp.argmax(logits).astype(jnp.int32)
    _ids[0] = jnp.concatenate([ids, nxt[None]])
    return nxt


_x = jnp.ones((8, 16), jnp.float32)
_calls = [0]


def fresh_while() -> jax.Array:
    """An eager while loop whose body closes over a value of this call."""
    _calls[0] += 1
    scale = 1.0 + _calls[0]

    def body(c: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return c[0] + 1, jnp.tanh(c[1]) * scale

    _, y = jax.lax.while_loop(lambda c: c[0] < 4, body, (jnp.int32(0), _x))
    return y


@jax.jit
def _project(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w)


_w = jnp.ones((16, 16), jnp.float32)


def warm_step() -> jax.Array:
    """A jitted step on the shapes of its warm-up."""
    return _project(_x, _w)


SEQ, HEADS, HEAD_DIM, TOKENS = 64, 4, 32, 8
_cache = tuple(jnp.zeros((SEQ, HEADS, HEAD_DIM), jnp.float32) for _ in range(4))


def _loop(cache: tuple[jax.Array, ...], pos: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
    def body(state: tuple[tuple[jax.Array, ...], jax.Array]) -> tuple[tuple[jax.Array, ...], jax.Array]:
        c, p = state
        new = jnp.full((1, HEADS, HEAD_DIM), p, jnp.float32)
        return tuple(jax.lax.dynamic_update_slice(x, new, (p, 0, 0)) for x in c), p + 1

    end = pos + TOKENS
    return jax.lax.while_loop(lambda s: s[1] < end, body, (cache, pos))


def fresh_jit_decode() -> tuple[tuple[jax.Array, ...], jax.Array]:
    """The decode loop jitted afresh on every call, its cache not donated."""
    return jax.jit(lambda c, p: _loop(c, p))(_cache, jnp.int32(0))
