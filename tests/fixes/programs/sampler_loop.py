"""gemma's sampler loop, in its shape (gemma/gm/text/_sampler_loop.py) without its libraries.

``SamplerLoop._sample_loop`` is jitted with ``functools.partial(jax.jit, static_argnames=('self',))``
and runs the decode ``while_loop`` over a state holding the KV caches; ``sample`` rebinds the state
from the result. Nothing is donated, so XLA copies every cache before the loop on every call (HD009).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

LAYERS, SEQ, HEADS, DIM, VOCAB, STEPS = 2, 64, 4, 32, 512, 12


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SamplingState:
    """What the loop carries: the step, one cache per layer, the tokens so far."""

    step: jax.Array
    cache: tuple[jax.Array, ...]
    tokens: jax.Array


@dataclasses.dataclass(frozen=True)
class SamplerLoop:
    """A greedy decode loop over a toy model (the cache rows are the hidden states)."""

    steps: int

    @functools.partial(jax.jit, static_argnames=("self",))
    def _sample_loop(self, *, params: jax.Array, state: SamplingState) -> SamplingState:
        def cond(s: SamplingState) -> jax.Array:
            return s.step < self.steps

        def body(s: SamplingState) -> SamplingState:
            hidden = s.cache[0][s.step % SEQ].sum(0) + s.cache[1][(s.step + 1) % SEQ].sum(0)
            token = jnp.argmax(hidden @ params, axis=-1).astype(jnp.int32)
            row = jnp.full((1, HEADS, DIM), token, jnp.float32) / VOCAB
            cache = tuple(jax.lax.dynamic_update_slice(c, row, ((s.step + 2) % SEQ, 0, 0)) for c in s.cache)
            return SamplingState(s.step + 1, cache, s.tokens.at[s.step].set(token))

        state = jax.lax.while_loop(cond, body, state)
        return state

    def sample(self, params: jax.Array, state: SamplingState) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        """Run the loop; the tokens and the final caches."""
        state = self._sample_loop(params=params, state=state)
        return state.tokens, state.cache


def init(seed: int) -> tuple[jax.Array, SamplingState]:
    """Random parameters and caches for ``seed``."""
    key = jax.random.key(seed)
    params = jax.random.normal(key, (DIM, VOCAB), jnp.float32)
    cache = tuple(jax.random.normal(jax.random.fold_in(key, i + 1), (SEQ, HEADS, DIM), jnp.float32)
                  for i in range(LAYERS))
    return params, SamplingState(jnp.int32(0), cache, jnp.zeros((STEPS,), jnp.int32))


LOOP = SamplerLoop(steps=STEPS)


def outputs(seed: int) -> tuple[jax.Array, ...]:
    """The tokens and caches one call returns."""
    params, state = init(seed)
    tokens, cache = LOOP.sample(params, state)
    return (tokens, *cache)
