"""A greedy sampler that runs a temperature softmax only to take its argmax.

``step`` widens bf16 logits to f32, divides by the temperature, takes the softmax over the
vocabulary and then its argmax: ``argmax(softmax(x / T)) == argmax(x)``, so the max, the exp, the
sum and the divide are work whose result the argmax does not need. ``step_fixed`` takes the argmax
of the widened logits directly. ``step_probs`` returns the probabilities next to the token: there
the softmax is needed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

BATCH, VOCAB = 8, 256000


@jax.jit
def sample(logits: jax.Array, temperature: jax.Array) -> jax.Array:
    probs = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    return jnp.argmax(probs, axis=-1)


@jax.jit
def sample_fixed(logits: jax.Array, temperature: jax.Array) -> jax.Array:
    del temperature  # argmax(x / T) == argmax(x) for T > 0
    return jnp.argmax(logits.astype(jnp.float32), axis=-1)


@jax.jit
def sample_with_probs(logits: jax.Array, temperature: jax.Array) -> tuple[jax.Array, jax.Array]:
    probs = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    return jnp.argmax(probs, axis=-1), probs


_logits = jax.random.normal(jax.random.key(0), (BATCH, VOCAB), jnp.bfloat16)
_temperature = jnp.float32(0.7)


def step() -> jax.Array:
    """One call of the sampler that takes the argmax of a softmax."""
    return sample(_logits, _temperature)


def step_fixed() -> jax.Array:
    """The argmax of the logits themselves."""
    return sample_fixed(_logits, _temperature)


def step_probs() -> tuple[jax.Array, jax.Array]:
    """The softmax's probabilities are returned too: nothing to remove."""
    return sample_with_probs(_logits, _temperature)
