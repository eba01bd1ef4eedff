"""A greedy decode loop whose KV cache is one stacked array [batch, layers, 2, heads, positions, dim].

``generate`` does what keras-hub's ``call_with_cache`` does: it slices each layer's cache out of the
stacked loop state (``cache[:, i]``), writes the new token's key and value into it
(``dynamic_update_slice``), and re-stacks every layer (``jnp.stack(caches, axis=1)``) on every token,
so that the whole cache is written where one row per layer changes. ``generate_in_place`` writes the
new keys and values into the stacked cache with one ``dynamic_update_slice`` per layer and reads each
layer's slice from it. Both give the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

BATCH, LAYERS, HEADS, POSITIONS, DIM, VOCAB, TOKENS = 1, 2, 2, 256, 16, 64, 8
WIDTH = HEADS * DIM

_keys = jax.random.split(jax.random.PRNGKey(0), 3)
_EMBED = jax.random.normal(_keys[0], (VOCAB, WIDTH))
_QKV = jax.random.normal(_keys[1], (LAYERS, WIDTH, 3 * WIDTH)) * 0.3
_OUT = jax.random.normal(_keys[2], (LAYERS, WIDTH, WIDTH)) * 0.3


def _project(x: jax.Array, layer: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    q, k, v = jnp.split(x @ _QKV[layer].astype(x.dtype), 3, axis=-1)
    return tuple(a.reshape(BATCH, HEADS, 1, DIM) for a in (q, k, v))  # type: ignore[return-value]


def _attend(x: jax.Array, q: jax.Array, keys: jax.Array, values: jax.Array, t: jax.Array,
            layer: int) -> jax.Array:
    scores = jnp.einsum("bhqd,bhsd->bhqs", q, keys)
    scores = jnp.where(jnp.arange(POSITIONS) <= t, scores, -1e9)
    weights = jax.nn.softmax(scores.astype(jnp.float32), -1).astype(x.dtype)
    out = jnp.einsum("bhqs,bhsd->bhqd", weights, values).reshape(BATCH, 1, WIDTH)
    return x + out @ _OUT[layer].astype(x.dtype)


Carry = tuple[jax.Array, jax.Array, jax.Array]


def _rebuild(t: jax.Array, carry: Carry) -> Carry:
    cache, token, tokens = carry
    x = (_EMBED[token] + _EMBED[t]).astype(cache.dtype)[:, None, :]
    caches = []
    for i in range(LAYERS):
        layer = cache[:, i]
        q, k, v = _project(x, i)
        keys = jax.lax.dynamic_update_slice(layer[:, 0], k, (0, 0, t, 0))
        values = jax.lax.dynamic_update_slice(layer[:, 1], v, (0, 0, t, 0))
        x = _attend(x, q, keys, values, t, i)
        caches.append(jnp.stack([keys, values], axis=1))
    cache = jnp.stack(caches, axis=1)
    token = jnp.argmax(x[:, 0] @ _EMBED.T.astype(x.dtype), -1).astype(jnp.int32)
    return cache, token, tokens.at[:, t].set(token)


def _in_place(t: jax.Array, carry: Carry) -> Carry:
    cache, token, tokens = carry
    x = (_EMBED[token] + _EMBED[t]).astype(cache.dtype)[:, None, :]
    for i in range(LAYERS):
        q, k, v = _project(x, i)
        cache = jax.lax.dynamic_update_slice(cache, jnp.stack([k, v], axis=1)[:, None], (0, i, 0, 0, t, 0))
        x = _attend(x, q, cache[:, i, 0], cache[:, i, 1], t, i)
    token = jnp.argmax(x[:, 0] @ _EMBED.T.astype(x.dtype), -1).astype(jnp.int32)
    return cache, token, tokens.at[:, t].set(token)


def _loop(body: Callable[[jax.Array, Carry], Carry]) -> Callable[[jax.Array], jax.Array]:
    @jax.jit
    def generate(cache: jax.Array) -> jax.Array:
        start = (cache, jnp.ones((BATCH,), jnp.int32), jnp.zeros((BATCH, TOKENS), jnp.int32))
        return jax.lax.fori_loop(0, TOKENS, body, start)[2]
    return generate


generate = _loop(_rebuild)
generate_in_place = _loop(_in_place)
_F32 = jnp.zeros((BATCH, LAYERS, 2, HEADS, POSITIONS, DIM), jnp.float32)
_BF16 = _F32.astype(jnp.bfloat16)


def step() -> jax.Array:
    """The loop that re-stacks its cache every token (f32)."""
    return generate(_F32)


def step_in_place() -> jax.Array:
    """The loop that updates the stacked cache in place (f32)."""
    return generate_in_place(_F32)


def step_bf16() -> jax.Array:
    """The re-stacking loop on a bf16 cache."""
    return generate(_BF16)
