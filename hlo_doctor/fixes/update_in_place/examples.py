"""``update-in-place``'s examples: code it must leave alone (VALID) and code with its fixed text
(INVALID). Each is a test (tests/fixes/test_catalog_examples.py) run through the real codemod.
"""

from __future__ import annotations

from hlo_doctor.fixes.source.base import SourceExample

# tests/fixes/programs/layer_cache.py's loop body: one row per layer, the stack concatenated back.
_CONCAT = '''\
import jax
import jax.numpy as jnp


def step(t, cache, x):
    for i in range(4):
        row = jnp.tanh(x * (i + 1))[:, None, :]
        layer = jax.lax.dynamic_update_slice(cache[i], row, (0, t, 0))
        cache = jnp.concatenate([cache[:i], layer[None], cache[i + 1:]], axis=0)
        x = x + layer.sum(axis=1)
    return cache, x
'''

_AT_SET = '''\
import jax.numpy as jnp


def step(t, cache, x):
    for i in range(4):
        layer = cache[i].at[:, t].set(jnp.tanh(x))
        cache = jnp.concatenate([cache[:i], layer[None], cache[i + 1:]])
    return cache
'''

_FIRST_LAYER = '''\
from jax import lax
import jax.numpy as jnp


def write(cache, row, t):
    first = lax.dynamic_update_slice(cache[0], row, (t, 0))
    cache = jnp.concatenate((cache[:0], jnp.expand_dims(first, 0), cache[0 + 1:]), axis=0)
    return cache
'''

# keras-hub 0.32's GemmaCausalLM.call_with_cache (gemma_causal_lm.py:201-212), cut down: each layer
# returns its whole next cache from a call, and the list is re-stacked.
_RESTACK = '''\
from keras import ops


def call_with_cache(self, x, cache, cache_update_index):
    caches = []
    for i, transformer_layer in enumerate(self.backbone.transformer_layers):
        current_cache = cache[:, i, ...]
        x, next_cache = transformer_layer(x, cache=current_cache, cache_update_index=cache_update_index)
        caches.append(next_cache)
    cache = ops.stack(caches, axis=1)
    return x, cache
'''

VALID = (
    SourceExample(code=_CONCAT.replace("jax.lax.dynamic_update_slice(cache[i], row, (0, t, 0))",
                                       "attend(cache[i], row, t)"),
                  line=9, reason="not an update of cache[i] written here",
                  note="the slab comes from a call: which rows it changes is not visible here"),
    SourceExample(code=_CONCAT.replace("        cache = jnp.concatenate", "        n = cache.sum()\n"
                                       "        cache = jnp.concatenate"),
                  line=10, reason="cache is read at line 9", note="the buffer is read between update and concatenate"),
    SourceExample(code=_CONCAT.replace("range(4)", "range(-2, 2)"), line=9, reason="may be negative",
                  note="a negative index names another slab than a start index"),
    SourceExample(code=_RESTACK, line=10, reason="put back together from the list caches",
                  note="keras-hub's re-stack: each layer's new cache comes from transformer_layer(...)"),
    SourceExample(code=_CONCAT, line=7, kind="no-pattern", reason="holds no jnp.concatenate",
                  note="the line changed since the run"),
)

INVALID = (
    SourceExample(code=_CONCAT, line=9, fixed=_CONCAT.replace(
        "        layer = jax.lax.dynamic_update_slice(cache[i], row, (0, t, 0))\n"
        "        cache = jnp.concatenate([cache[:i], layer[None], cache[i + 1:]], axis=0)\n",
        "        cache = jax.lax.dynamic_update_slice(cache, row[None], (i, 0, t, 0))\n"
        "        layer = cache[i]\n"),
        note="the row written into the stacked cache; the layer read back for the next line"),
    SourceExample(code=_AT_SET, line=6, fixed=_AT_SET.replace(
        "        layer = cache[i].at[:, t].set(jnp.tanh(x))\n"
        "        cache = jnp.concatenate([cache[:i], layer[None], cache[i + 1:]])\n",
        "        cache = cache.at[i, :, t].set(jnp.tanh(x))\n"),
        note=".at[...].set on the slab, named at the update's line; nothing else reads the slab"),
    SourceExample(code=_FIRST_LAYER, fixed=_FIRST_LAYER.replace(
        "    first = lax.dynamic_update_slice(cache[0], row, (t, 0))\n"
        "    cache = jnp.concatenate((cache[:0], jnp.expand_dims(first, 0), cache[0 + 1:]), axis=0)\n",
        "    cache = lax.dynamic_update_slice(cache, row[None], (0, t, 0))\n"),
        note="whole file: a literal index, expand_dims, a tuple of parts"),
)
