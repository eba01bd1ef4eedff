"""Per-call work that depends on nothing that changes between calls, and the same steps without it.

- ``step``: a decode step whose bf16 embedding table is widened to f32 (and read transposed) on
  every call; ``step_prepared``: the table widened once, outside the step.
- ``step_loop``: a jitted ``while_loop`` sampler that reads ``params["emb"].astype(f32)`` in its
  body (XLA hoists the convert out of the loop, but not out of the call); ``step_loop_prepared``.
- ``step_rng``: a projection drawn from a constant key (``PRNGKey(0)``) inside the jitted step, on
  every call; ``step_rng_fixed``: drawn once and passed in.
- ``step_init``: an eager ``generate()`` that runs the model's initialisation (random init of every
  weight and a forward pass, all discarded but a zero cache) on every call, as transformers' Flax
  ``init_cache`` does; ``step_init_once``: the cache built once.
- ``step_scan``: a scan over stacked layers whose weights are cast and moved to the scan's axis on
  every call (two causes); ``step_scan_prepared``: both stored as the scan uses them.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

V, D, B, N = 2048, 128, 8, 8
_KEY = jax.random.PRNGKey(1)
PARAMS = {"emb": jax.random.normal(_KEY, (V, D), jnp.bfloat16),
          "w": jax.random.normal(jax.random.PRNGKey(2), (D, D), jnp.bfloat16)}
PREPARED = jax.tree.map(lambda w: w.astype(jnp.float32), PARAMS)
X = jax.random.normal(jax.random.PRNGKey(3), (B, D), jnp.float32)
TOK = jnp.zeros((B,), jnp.int32)


@jax.jit
def decode(params: Any, x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w"].astype(jnp.float32))
    logits = h @ params["emb"].T.astype(jnp.float32)
    return jnp.argmax(logits, -1)


def step() -> jax.Array:
    return decode(PARAMS, X)


def step_prepared() -> jax.Array:
    return decode(PREPARED, X)


def _body(params: Any, carry: Any) -> Any:
    i, tok, toks = carry
    emb = params["emb"].astype(jnp.float32)
    h = jnp.tanh(emb[tok] @ params["w"].astype(jnp.float32))
    nxt = jnp.argmax(h @ emb.T, -1).astype(jnp.int32)
    return i + 1, nxt, toks.at[i].set(nxt)


@jax.jit
def sample(params: Any, tok: jax.Array) -> jax.Array:
    toks = jnp.zeros((N, B), jnp.int32)
    _, _, toks = jax.lax.while_loop(lambda c: c[0] < N, lambda c: _body(params, c), (0, tok, toks))
    return toks


def step_loop() -> jax.Array:
    return sample(PARAMS, TOK)


def step_loop_prepared() -> jax.Array:
    return sample(PREPARED, TOK)


@jax.jit
def project(x: jax.Array) -> jax.Array:
    w = jax.random.normal(jax.random.PRNGKey(0), (D, V), jnp.float32) * 0.02
    return jnp.argmax(x @ w, -1)


@jax.jit
def project_fixed(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.argmax(x @ w, -1)


_W = jax.random.normal(jax.random.PRNGKey(0), (D, V), jnp.float32) * 0.02


def step_rng() -> jax.Array:
    return project(X)


def step_rng_fixed() -> jax.Array:
    return project_fixed(X, _W)


class TinyLM:
    """A model built like transformers' Flax models: the constructor runs ``init`` (random weights and
    a forward pass), and ``init_cache`` runs ``init`` again to keep only a zero cache."""

    def __init__(self) -> None:
        self.params = self.init(jax.random.PRNGKey(0), jnp.ones((1, 1), jnp.int32))["params"]

    def init(self, key: jax.Array, ids: jax.Array) -> dict[str, Any]:
        k_emb, k_w = jax.random.split(key)
        params = {"emb": jax.random.normal(k_emb, (V, D)) * 0.02, "w": jax.random.normal(k_w, (D, D)) * 0.02}
        hidden = jnp.tanh(params["emb"][ids] @ params["w"])  # the forward pass init runs
        return {"params": params, "cache": jnp.zeros_like(hidden)}

    def init_cache(self, batch: int, length: int) -> jax.Array:
        return self.init(jax.random.PRNGKey(0), jnp.ones((batch, length), jnp.int32))["cache"]

    def generate(self, tok: jax.Array, cache: jax.Array | None = None) -> jax.Array:
        if cache is None:
            cache = self.init_cache(B, N)
        out = []
        for _ in range(N):
            tok = _next_token(self.params, cache, tok)
            out.append(tok)
        return jnp.stack(out)


@jax.jit
def _next_token(params: Any, cache: jax.Array, tok: jax.Array) -> jax.Array:
    h = jnp.tanh(params["emb"][tok] @ params["w"]) + cache[:, 0]
    return jnp.argmax(h @ params["emb"].T, -1).astype(jnp.int32)


MODEL = TinyLM()
_CACHE: list[jax.Array] = []


def step_init() -> jax.Array:
    return MODEL.generate(TOK)


def step_init_once() -> jax.Array:
    if not _CACHE:
        _CACHE.append(MODEL.init_cache(B, N))
    return MODEL.generate(TOK, _CACHE[0])


# A decoder that scans over stacked layers, as a library's scan-over-layers does: its f32 projections
# cast to bf16 and its stacked weights moved to the scan's axis on every call (two causes, two remedies:
# the stored dtype and the stored layout); ``step_scan_prepared`` gets them as the scan uses them.
L, DS = 6, 256
STACK = {"wt": jax.random.normal(jax.random.PRNGKey(4), (DS, L, DS), jnp.float32),
         "proj": jax.random.normal(jax.random.PRNGKey(5), (L, DS, DS), jnp.float32)}
# Prepared: moved once, and the projections computed with in their stored f32 (XLA:CPU widens bf16
# weights to f32 for a dot on every call, so storing them as bf16 would move the convert, not remove it).
STACK_PREPARED = {"wt": jnp.moveaxis(STACK["wt"], 1, 0), "proj": STACK["proj"]}
XS = jax.random.normal(jax.random.PRNGKey(6), (B, DS), jnp.float32)


def _scan_layers(layers: jax.Array, proj: jax.Array, x: jax.Array) -> jax.Array:
    def body(h: jax.Array, lw: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        w, p = lw
        h = jnp.tanh(h @ w)
        return (h.astype(jnp.bfloat16) @ p).astype(jnp.float32), None

    h, _ = jax.lax.scan(body, x, (layers, proj))
    return jnp.argmax(h, -1)


@jax.jit
def scan_decode(params: Any, x: jax.Array) -> jax.Array:
    layers = jnp.moveaxis(params["wt"], 1, 0)
    proj = params["proj"].astype(jnp.bfloat16)
    return _scan_layers(layers, proj, x)


@jax.jit
def scan_decode_prepared(params: Any, x: jax.Array) -> jax.Array:
    return _scan_layers(params["wt"], params["proj"], x)


def step_scan() -> jax.Array:
    return scan_decode(STACK, XS)


def step_scan_prepared() -> jax.Array:
    return scan_decode_prepared(STACK_PREPARED, XS)
