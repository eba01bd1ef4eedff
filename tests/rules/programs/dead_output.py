"""A decode step that writes its f32 log-probabilities into the state it returns; no later call reads them.

``step`` computes the logits, picks the next token by argmax and returns the new state with the
log-probabilities of every token in it (``state["logprobs"]``, f32 [batch, vocab]); the next call
takes that state back (donated) and never reads them, so jit drops that argument: the output is
written on every call and read by no program. ``step_without_logits`` is the same step with no
log-probabilities in the state; both give the same tokens.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp

VOCAB = int(os.environ.get("DEAD_OUTPUT_VOCAB", "32000"))
BATCH, WIDTH = 48, 64

_W = jax.random.normal(jax.random.PRNGKey(0), (WIDTH, VOCAB)) * 0.05
_EMBED = jax.random.normal(jax.random.PRNGKey(1), (VOCAB, WIDTH))


def _decode(state: dict[str, jax.Array], w: jax.Array, embed: jax.Array) -> dict[str, jax.Array]:
    x = embed[state["token"]]
    logits = x @ w
    token = jnp.argmax(logits, -1).astype(jnp.int32)
    return {"token": token, "logprobs": jax.nn.log_softmax(logits.astype(jnp.float32), -1)}


def _decode_lean(state: dict[str, jax.Array], w: jax.Array, embed: jax.Array) -> dict[str, jax.Array]:
    x = embed[state["token"]]
    return {"token": jnp.argmax(x @ w, -1).astype(jnp.int32)}


_decode_jit = jax.jit(_decode, donate_argnums=0)
_lean_jit = jax.jit(_decode_lean, donate_argnums=0)
_state = {"full": {"token": jnp.zeros((BATCH,), jnp.int32), "logprobs": jnp.zeros((BATCH, VOCAB))},
          "lean": {"token": jnp.zeros((BATCH,), jnp.int32)}}


def step() -> jax.Array:
    """One decode step returning its state with the log-probabilities in it, fed back for the next call."""
    _state["full"] = _decode_jit(_state["full"], _W, _EMBED)
    return _state["full"]["token"]


def step_without_logits() -> jax.Array:
    """The same step with no log-probabilities in the state."""
    _state["lean"] = _lean_jit(_state["lean"], _W, _EMBED)
    return _state["lean"]["token"]
