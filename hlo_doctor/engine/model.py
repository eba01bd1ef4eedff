"""A Gemma-shaped decoder: embeddings, RMSNorm, grouped-query attention with RoPE and a KV cache,
gated GELU MLP, final norm, and an LM head tied to the embeddings.

Parameters are bf16, generated from a seed (nothing is downloaded), and always passed to the jitted
functions as arguments: closing over them would embed them as HLO constants and bloat every trace.
Matmuls accumulate in float32 and round to bf16, as a matrix unit does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Params = dict[str, Any]
KVCaches = tuple[jax.Array, jax.Array]
"""Keys and values, each ``bf16[num_layers, padded_num_reqs, max_model_len, num_kv_heads, head_dim]``."""

_RMS_EPS = 1e-6
_ROPE_BASE = 10000.0
# With tied embeddings and random weights, a residual stream dominated by the input embedding makes
# every step predict its own input token. A small embedding scale and strong attention/MLP outputs
# make the generated tokens vary from step to step, as a trained model's do.
_EMBED_GAIN = 0.25
_OUT_GAIN = 4.0


@dataclass(frozen=True, slots=True)
class ModelDims:
    """The static sizes the forward functions need (hashable: it is bound, not traced)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    mlp_dim: int
    dtype: Any = jnp.bfloat16


def init_params(dims: ModelDims, seed: int) -> Params:
    """Seeded bf16 parameters, identical on every backend (drawn on the host with numpy's PCG64)."""
    rng = np.random.default_rng(seed)

    def dense(shape: tuple[int, ...], fan_in: int, gain: float = 1.0) -> jax.Array:
        values = rng.standard_normal(shape, dtype=np.float32)
        values *= np.float32(gain / math.sqrt(fan_in))
        return jax.device_put(values.astype(jnp.bfloat16))

    def zeros(size: int) -> jax.Array:
        return jax.device_put(np.zeros((size,), dtype=jnp.bfloat16))

    q_dim = dims.num_heads * dims.head_dim
    kv_dim = dims.num_kv_heads * dims.head_dim
    layers = []
    for _ in range(dims.num_layers):
        layers.append({
            "input_norm": zeros(dims.hidden_size),
            "q_proj": dense((dims.hidden_size, q_dim), dims.hidden_size),
            "k_proj": dense((dims.hidden_size, kv_dim), dims.hidden_size),
            "v_proj": dense((dims.hidden_size, kv_dim), dims.hidden_size),
            "o_proj": dense((q_dim, dims.hidden_size), q_dim, _OUT_GAIN),
            "post_attention_norm": zeros(dims.hidden_size),
            "gate_proj": dense((dims.hidden_size, dims.mlp_dim), dims.hidden_size),
            "up_proj": dense((dims.hidden_size, dims.mlp_dim), dims.hidden_size),
            "down_proj": dense((dims.mlp_dim, dims.hidden_size), dims.mlp_dim, _OUT_GAIN),
        })
    # The LM head reuses these rows (tied, as in Gemma).
    embed = dense((dims.vocab_size, dims.hidden_size), dims.hidden_size, _EMBED_GAIN)
    return {"embed": embed, "layers": layers, "final_norm": zeros(dims.hidden_size)}


def init_kv_caches(dims: ModelDims, num_reqs: int, max_model_len: int) -> KVCaches:
    """Zeroed key and value caches for ``num_reqs`` padded requests."""
    shape = (dims.num_layers, num_reqs, max_model_len, dims.num_kv_heads, dims.head_dim)
    return jnp.zeros(shape, dims.dtype), jnp.zeros(shape, dims.dtype)


def _dot(x: jax.Array, w: jax.Array) -> jax.Array:
    """x @ w with float32 accumulation, rounded back to the input dtype."""
    return jnp.matmul(x, w, preferred_element_type=jnp.float32).astype(x.dtype)


def _rms_norm(x: jax.Array, weight: jax.Array) -> jax.Array:
    """Gemma's RMSNorm: normalise in float32, scale by (1 + weight)."""
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + _RMS_EPS)
    return (x32 * (1.0 + weight.astype(jnp.float32))).astype(x.dtype)


def _rope(x: jax.Array, positions: jax.Array) -> jax.Array:
    """Rotary position embedding on ``x[..., positions-aligned, heads, head_dim]``."""
    head_dim = x.shape[-1]
    freqs = _ROPE_BASE ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    angles = positions.astype(jnp.float32)[..., None, None] * freqs
    sin, cos = jnp.sin(angles), jnp.cos(angles)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def _mlp(layer: Params, x: jax.Array) -> jax.Array:
    gate = jax.nn.gelu(_dot(x, layer["gate_proj"]).astype(jnp.float32), approximate=True)
    up = _dot(x, layer["up_proj"]).astype(jnp.float32)
    return _dot((gate * up).astype(x.dtype), layer["down_proj"])


def _embed(params: Params, input_ids: jax.Array, dims: ModelDims) -> jax.Array:
    x = jnp.take(params["embed"], input_ids, axis=0)
    return (x.astype(jnp.float32) * math.sqrt(dims.hidden_size)).astype(dims.dtype)


def prefill_forward(
    params: Params, kv_caches: KVCaches, input_ids: jax.Array, *, dims: ModelDims
) -> tuple[KVCaches, jax.Array]:
    """Run ``int32[B, T]`` prompts; fill cache positions ``0..T-1``; return the last hidden state ``[B, H]``."""
    k_cache, v_cache = kv_caches
    batch, length = input_ids.shape
    group = dims.num_heads // dims.num_kv_heads
    positions = jnp.arange(length, dtype=jnp.int32)
    causal = positions[:, None] >= positions[None, :]
    x = _embed(params, input_ids, dims)
    for i, layer in enumerate(params["layers"]):
        h = _rms_norm(x, layer["input_norm"])
        q = _dot(h, layer["q_proj"]).reshape(batch, length, dims.num_kv_heads, group, dims.head_dim)
        k = _dot(h, layer["k_proj"]).reshape(batch, length, dims.num_kv_heads, dims.head_dim)
        v = _dot(h, layer["v_proj"]).reshape(batch, length, dims.num_kv_heads, dims.head_dim)
        q = _rope(q.reshape(batch, length, dims.num_heads, dims.head_dim), positions).reshape(q.shape)
        k = _rope(k, positions)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k[None], (i, 0, 0, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v[None], (i, 0, 0, 0, 0))
        scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32)
        scores = jnp.where(causal, scores / math.sqrt(dims.head_dim), -jnp.inf)
        probs = jax.nn.softmax(scores, axis=-1).astype(dims.dtype)
        attn = jnp.einsum("bkgts,bskd->btkgd", probs, v, preferred_element_type=jnp.float32)
        attn = attn.astype(dims.dtype).reshape(batch, length, dims.num_heads * dims.head_dim)
        x = x + _dot(attn, layer["o_proj"])
        x = x + _mlp(layer, _rms_norm(x, layer["post_attention_norm"]))
    hidden_states = _rms_norm(x[:, -1, :], params["final_norm"])
    return (k_cache, v_cache), hidden_states


def decode_forward(
    params: Params, kv_caches: KVCaches, input_ids: jax.Array, position: jax.Array, *, dims: ModelDims
) -> tuple[KVCaches, jax.Array]:
    """One token per request (``int32[B]``) at cache slot ``position`` (int32 scalar); hidden ``[B, H]``."""
    k_cache, v_cache = kv_caches
    batch = input_ids.shape[0]
    max_len = k_cache.shape[2]
    group = dims.num_heads // dims.num_kv_heads
    visible = jnp.arange(max_len, dtype=jnp.int32) <= position
    x = _embed(params, input_ids, dims)
    for i, layer in enumerate(params["layers"]):
        h = _rms_norm(x, layer["input_norm"])
        q = _dot(h, layer["q_proj"]).reshape(batch, dims.num_heads, dims.head_dim)
        k = _dot(h, layer["k_proj"]).reshape(batch, dims.num_kv_heads, dims.head_dim)
        v = _dot(h, layer["v_proj"]).reshape(batch, dims.num_kv_heads, dims.head_dim)
        q = _rope(q, position).reshape(batch, dims.num_kv_heads, group, dims.head_dim)
        k = _rope(k, position)
        zero = jnp.zeros((), jnp.int32)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k[None, :, None], (i, zero, position, zero, zero))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v[None, :, None], (i, zero, position, zero, zero))
        keys, values = k_cache[i], v_cache[i]
        scores = jnp.einsum("bkgd,bskd->bkgs", q, keys, preferred_element_type=jnp.float32)
        scores = jnp.where(visible, scores / math.sqrt(dims.head_dim), -jnp.inf)
        probs = jax.nn.softmax(scores, axis=-1).astype(dims.dtype)
        attn = jnp.einsum("bkgs,bskd->bkgd", probs, values, preferred_element_type=jnp.float32)
        attn = attn.astype(dims.dtype).reshape(batch, dims.num_heads * dims.head_dim)
        x = x + _dot(attn, layer["o_proj"])
        x = x + _mlp(layer, _rms_norm(x, layer["post_attention_norm"]))
    hidden_states = _rms_norm(x, params["final_norm"])
    return (k_cache, v_cache), hidden_states


def compute_logits(params: Params, hidden_states: jax.Array) -> jax.Array:
    """LM head tied to the embeddings: ``[B, H] -> [B, V]`` in the model dtype (bf16)."""
    embed = params["embed"]
    logits = jnp.einsum("bh,vh->bv", hidden_states, embed, preferred_element_type=jnp.float32)
    return logits.astype(embed.dtype)
