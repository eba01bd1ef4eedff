"""The seed report's greedy sampling tail at its own shape (batch 512, Gemma's 256,000-token vocabulary).

``step`` is tpu-inference 0.24's path: the runner widens the bf16 logits eagerly (its own
``jit_convert_element_type`` program), then a jitted ``sample()`` whose greedy branch returns its
float32 input (an aliasing copy) takes the argmax over the widened tensor. ``step_fixed`` is the
bundled fix's path: argmax on the bf16 logits, no float32 logits returned without logprobs.

    hlo-doctor profile benchmarks/device/seed_sampler.py:step --steps 10 --out runs/seed-b512
    hlo-doctor profile benchmarks/device/seed_sampler.py:step_fixed --steps 10 --out runs/seed-b512-fixed
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp

BATCH = int(os.environ.get("SEED_SAMPLER_BATCH", "512"))
VOCAB = int(os.environ.get("SEED_SAMPLER_VOCAB", "256000"))

_logits = jax.random.normal(jax.random.key(0), (BATCH, VOCAB), jnp.float32).astype(jnp.bfloat16)


@jax.jit
def sample(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Greedy branch of the 0.24 sampler: returns its (float32) input beside the tokens."""
    greedy_tokens = jnp.argmax(logits, axis=-1)
    logits = logits.astype(jnp.float32)
    return greedy_tokens, logits


@jax.jit
def sample_fixed(logits: jax.Array) -> jax.Array:
    """The fixed greedy sampler: argmax on the model-dtype logits, no float32 logits without logprobs."""
    return jnp.argmax(logits, axis=-1)


def step() -> tuple[jax.Array, jax.Array]:
    """One greedy sampling step as tpu-inference 0.24 runs it."""
    return sample(_logits.astype(jnp.float32))


def step_fixed() -> jax.Array:
    """One greedy sampling step after the fix."""
    return sample_fixed(_logits)
