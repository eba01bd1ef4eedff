"""A flax linen decoder scanned over its layers with ``nn.scan``, the KV cache a variable collection.

The layers are one ``nn.scan`` of a decoder block over ``LAYERS`` with ``variable_axes={"params": 0,
"cache": 0}``: flax passes each layer's slice of the stacked cache to the block as the scan's input
and stacks the blocks' updated caches as its output, the pattern of flax models that scan their
layers (``nn.scan`` with a ``cache`` collection). One decode step writes one position of every
layer's cache. ``step`` runs it as a jitted decode step with the cache donated; ``step_carried`` is
the same block written by hand with the stacked cache in ``lax.scan``'s carry, updated in place.

    hlo-doctor profile benchmarks/field/flax_scan_decoder.py:step   (with the field venv)
"""

from __future__ import annotations

import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

LAYERS = int(os.environ.get("FIELD_LAYERS", "4"))
POSITIONS = int(os.environ.get("FIELD_POSITIONS", "1024"))
WIDTH = int(os.environ.get("FIELD_WIDTH", "256"))
BATCH = 4


class Block(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, t: jax.Array) -> tuple[jax.Array, None]:
        cache = self.variable("cache", "keys", jnp.zeros, (BATCH, POSITIONS, WIDTH))
        k = nn.Dense(WIDTH, use_bias=False, name="key")(x)
        cache.value = jax.lax.dynamic_update_slice(cache.value, k[:, None, :], (0, t, 0))
        scores = jnp.einsum("bd,bsd->bs", x, cache.value) / WIDTH
        x = x + jnp.einsum("bs,bsd->bd", jax.nn.softmax(scores, -1), cache.value)
        return x, None


class Decoder(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, t: jax.Array) -> jax.Array:
        layers = nn.scan(Block, variable_axes={"params": 0, "cache": 0}, split_rngs={"params": True},
                         in_axes=nn.broadcast, length=LAYERS)
        x, _ = layers(name="layers")(x, t)
        return x


_model = Decoder()
_x = jax.random.normal(jax.random.PRNGKey(1), (BATCH, WIDTH))
_vars = _model.init(jax.random.PRNGKey(0), _x, jnp.int32(0))
_params = _vars["params"]


def _decode(params: Any, cache: Any, x: jax.Array, t: jax.Array) -> tuple[jax.Array, Any]:
    x, updated = _model.apply({"params": params, "cache": cache}, x, t, mutable=["cache"])
    return x, updated["cache"]


def _carried(params: Any, cache: Any, x: jax.Array, t: jax.Array) -> tuple[jax.Array, Any]:
    block = params["layers"]["key"]["kernel"]
    keys = cache["layers"]["keys"]

    def body(carry: tuple[jax.Array, jax.Array], layer: tuple[jax.Array, jax.Array]) -> tuple[
            tuple[jax.Array, jax.Array], None]:
        x, keys = carry
        kernel, i = layer
        k = x @ kernel
        keys = jax.lax.dynamic_update_slice(keys, k[None, :, None, :], (i, 0, t, 0))
        mine = keys[i]
        scores = jnp.einsum("bd,bsd->bs", x, mine) / WIDTH
        return (x + jnp.einsum("bs,bsd->bd", jax.nn.softmax(scores, -1), mine), keys), None

    (x, keys), _ = jax.lax.scan(body, (x, keys), (block, jnp.arange(LAYERS)))
    return x, {"layers": {"keys": keys}}


_decode_jit = jax.jit(_decode, donate_argnums=1)
_carried_jit = jax.jit(_carried, donate_argnums=1)
_state = {"scan": _vars["cache"], "carried": jax.tree.map(jnp.copy, _vars["cache"])}


def step() -> jax.Array:
    """One decode step of the flax ``nn.scan`` decoder (cache donated and fed back)."""
    x, _state["scan"] = _decode_jit(_params, _state["scan"], _x, jnp.int32(3))
    return x


def step_carried() -> jax.Array:
    """The same step with the stacked cache in the scan's carry, updated in place."""
    x, _state["carried"] = _carried_jit(_params, _state["carried"], _x, jnp.int32(3))
    return x


VARIANTS = {"baseline": step, "cache-carried": step_carried}
