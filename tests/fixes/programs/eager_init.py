"""An eager ``generate()`` built like transformers' Flax models (HD014): the constructor runs ``init``
(random weights and a forward pass), and ``init_cache`` runs ``init`` again on every call of
``generate()`` to keep only a zero cache."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

V, D, B, N = 2048, 128, 8, 8


class TinyLM:
    """A tiny language model whose cache is built by rerunning its initialisation."""

    def __init__(self) -> None:
        self.params = self.init(jax.random.PRNGKey(0), jnp.ones((1, 1), jnp.int32))["params"]

    def init(self, key: jax.Array, ids: jax.Array) -> dict[str, Any]:
        k_emb, k_w = jax.random.split(key)
        params = {"emb": jax.random.normal(k_emb, (V, D)) * 0.02, "w": jax.random.normal(k_w, (D, D)) * 0.02}
        hidden = jnp.tanh(params["emb"][ids] @ params["w"])  # the forward pass init runs
        return {"params": params, "cache": jnp.zeros_like(hidden)}

    def init_cache(self, batch: int, length: int) -> jax.Array:
        return self.init(jax.random.PRNGKey(0), jnp.ones((batch, length), jnp.int32))["cache"]

    def generate(self, tok: jax.Array) -> jax.Array:
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


def step() -> jax.Array:
    """One eager generate() call."""
    return MODEL.generate(jnp.zeros((B,), jnp.int32))


def outputs(seed: int) -> tuple[jax.Array, ...]:
    """The tokens generated from ``seed``'s first tokens (twice: the second call reuses what the first built)."""
    tok = jax.random.randint(jax.random.key(seed), (B,), 0, V, jnp.int32)
    return MODEL.generate(tok), MODEL.generate(tok + 1)
