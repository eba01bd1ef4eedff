"""A decode loop whose state (a KV cache and a position) goes through a jitted ``while`` loop.

``generate`` is called once per step and does not donate its state, so XLA copies the cache
parameters before the loop on every call; ``generate_donated`` donates it and the copies go.
The state is a dataclass with a ``ClassVar`` defined under ``from __future__ import annotations``
(as flax modules are).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

LAYERS, SEQ, HEADS, DIM, TOKENS = 2, 64, 4, 32, 8


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeState:
    """What the loop carries: one K and one V cache per layer, and the position."""

    # A string annotation naming ClassVar: dataclasses resolves it through sys.modules (flax modules
    # have such fields), which fails when the file is executed without being registered there.
    LAYOUT: ClassVar[str] = "seq, heads, dim"
    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    pos: jax.Array


def _body(state: DecodeState) -> DecodeState:
    def write(cache: jax.Array) -> jax.Array:
        new = jnp.full((1, HEADS, DIM), state.pos, cache.dtype)
        return jax.lax.dynamic_update_slice(cache, new, (state.pos, 0, 0))
    return DecodeState(tuple(write(c) for c in state.k), tuple(write(c) for c in state.v), state.pos + 1)


def _loop(state: DecodeState) -> DecodeState:
    end = state.pos + TOKENS
    return jax.lax.while_loop(lambda s: s.pos < end, _body, state)


generate = jax.jit(_loop)
generate_donated = jax.jit(_loop, donate_argnames="state")


def _fresh() -> DecodeState:
    def z() -> jax.Array:
        return jnp.zeros((SEQ, HEADS, DIM), jnp.float32)
    return DecodeState(tuple(z() for _ in range(LAYERS)), tuple(z() for _ in range(LAYERS)), jnp.int32(0))


_state = _fresh()


def step() -> DecodeState:
    """One call of the loop without donation: the caller keeps its state."""
    return generate(_state)


_donated_state = [_fresh()]


def step_donated() -> DecodeState:
    """One call with the state donated: the caller hands it over and keeps the result."""
    out = generate_donated(_donated_state[0])
    _donated_state[0] = dataclasses.replace(out, pos=jnp.int32(0))
    return out

