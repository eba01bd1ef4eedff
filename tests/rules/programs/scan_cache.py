"""A decode step that scans over stacked layers with the KV cache as the scan's xs and ys.

``step`` does what a decoder built on ``jax.lax.scan`` over its layers does when the per-layer cache
rides along as the scanned input and output (flax's ``nn.scan`` with the cache in ``in_axes`` /
``out_axes``): every iteration slices its layer out of the input stack, writes the new row into it
(``dynamic_update_slice``) and the scan writes the whole layer into a new output stack, which XLA
fills before the loop. ``step_in_place`` carries the stacked cache in the scan's carry and writes the
row with one ``dynamic_update_slice`` at (layer, position); both return the same cache and output.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp

LAYERS = int(os.environ.get("SCAN_CACHE_LAYERS", "4"))
POSITIONS = int(os.environ.get("SCAN_CACHE_POSITIONS", "256"))
WIDTH = int(os.environ.get("SCAN_CACHE_WIDTH", "64"))
BATCH = 4

_keys = jax.random.split(jax.random.PRNGKey(0), 2)
_W = jax.random.normal(_keys[0], (LAYERS, WIDTH, WIDTH)) * 0.1
_X = jax.random.normal(_keys[1], (BATCH, WIDTH))


def _layer(x: jax.Array, w: jax.Array, layer_cache: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    row = (x @ w)[:, None, :]
    layer_cache = jax.lax.dynamic_update_slice(layer_cache, row, (0, t, 0))
    x = x + jnp.tanh(layer_cache[:, 0] + row[:, 0])
    return x, layer_cache


@jax.jit
def _scan(cache: jax.Array, x: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    def body(x: jax.Array, layer: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        w, layer_cache = layer
        return _layer(x, w, layer_cache, t)
    x, cache = jax.lax.scan(body, x, (_W, cache))
    return cache, x


@jax.jit
def _carried(cache: jax.Array, x: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    def body(carry: tuple[jax.Array, jax.Array], layer: tuple[jax.Array, jax.Array]) -> tuple[
            tuple[jax.Array, jax.Array], None]:
        x, cache = carry
        w, i = layer
        row = (x @ w)[:, None, :]
        cache = jax.lax.dynamic_update_slice(cache, row[None], (i, 0, t, 0))
        x = x + jnp.tanh(cache[i, :, 0] + row[:, 0])
        return (x, cache), None
    (x, cache), _ = jax.lax.scan(body, (x, cache), (_W, jnp.arange(LAYERS)))
    return cache, x


_scan_donated = jax.jit(_scan.__wrapped__, donate_argnums=0)  # type: ignore[attr-defined]
_carried_donated = jax.jit(_carried.__wrapped__, donate_argnums=0)  # type: ignore[attr-defined]
_state = {"scan": jnp.zeros((LAYERS, BATCH, POSITIONS, WIDTH)),
          "carried": jnp.zeros((LAYERS, BATCH, POSITIONS, WIDTH))}


def step() -> jax.Array:
    """One decode step: the cache scanned as xs/ys (donated), fed back for the next call."""
    _state["scan"], x = _scan_donated(_state["scan"], _X, jnp.int32(1))
    return x


def step_in_place() -> jax.Array:
    """The same step with the cache in the scan's carry, updated in place (donated)."""
    _state["carried"], x = _carried_donated(_state["carried"], _X, jnp.int32(1))
    return x
