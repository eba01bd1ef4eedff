"""keras-hub's ``GemmaCausalLM.generate()`` (greedy sampler, JAX backend) on a tiny random Gemma.

A profile target (``hlo-doctor profile benchmarks/field/kerashub_gemma.py:step``) and a what-if
subject (``benchmarks/field/whatif.py benchmarks/field/kerashub_gemma.py``). No weights are
downloaded: the backbone is built from a config with random weights, ``preprocessor=None``, and
``generate()`` takes token ids and a padding mask.

Environment (read once, at import):

    FIELD_VOCAB   vocabulary size (default 256000, Gemma's)
    FIELD_SEQ     max_length = KV-cache length (default 32)
    FIELD_PROMPT  prompt tokens; the loop generates FIELD_SEQ - FIELD_PROMPT tokens (default 16)
    FIELD_BATCH   batch size (default 1)
    FIELD_LAYERS  decoder layers (default 2)
    FIELD_HIDDEN  hidden width (default 128)
    FIELD_EAGER   1: ``compile(run_eagerly=True)``, generate() runs op by op (default 0: keras'
                  own ``jax.jit`` of the whole generate step)

Variants (``VARIANTS``), each the same loop with one waste removed:

    baseline         keras-hub as shipped
    no-softmax       the greedy sampler takes argmax of the logits, not of softmax(logits / T)
    cache-in-place   one dynamic-update-slice into the stacked [B, L, 2, S, K, H] cache per layer,
                     instead of slicing each layer's cache out and re-stacking all of them
    prefill-prompt-only  the cache is seeded from the FIELD_PROMPT prompt positions, not from all
                     FIELD_SEQ positions of the padded input (the loop recomputes the rest)
    head-no-transpose  the tied LM head contracts the [V, D] embedding on D directly
                     (``einsum("...d,vd->...v")``) instead of ``matmul(x, transpose(embeddings))``
    loop-once        (FIELD_EAGER=1 only) the sampler's ``while_loop``, fresh closures on every
                     call and so compiled on every call, compiled once
    jit-compile      (FIELD_EAGER=1 only) keras-hub's own setting instead of a patch:
                     ``compile(run_eagerly=False)`` (the default), so keras jits the whole
                     generate step once and the sampler's loop is not traced on every call
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402
from keras_hub.src.models.gemma.gemma_causal_lm import GemmaCausalLM  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fieldlib import loop_compiled_once  # noqa: E402

VOCAB = int(os.environ.get("FIELD_VOCAB", "256000"))
SEQ = int(os.environ.get("FIELD_SEQ", "32"))
PROMPT = int(os.environ.get("FIELD_PROMPT", "16"))
BATCH = int(os.environ.get("FIELD_BATCH", "1"))
LAYERS = int(os.environ.get("FIELD_LAYERS", "2"))
HIDDEN = int(os.environ.get("FIELD_HIDDEN", "128"))
EAGER = os.environ.get("FIELD_EAGER", "0") == "1"
CONFIG = {"vocab": VOCAB, "seq": SEQ, "prompt": PROMPT, "batch": BATCH, "layers": LAYERS,
          "hidden": HIDDEN, "eager": EAGER, "keras": keras.__version__,
          "keras_hub": keras_hub.__version__}

keras.utils.set_random_seed(0)
backbone = keras_hub.models.GemmaBackbone(
    vocabulary_size=VOCAB, num_layers=LAYERS, num_query_heads=4, num_key_value_heads=1,
    hidden_dim=HIDDEN, intermediate_dim=2 * HIDDEN, head_dim=HIDDEN // 4)

_rng = np.random.default_rng(0)
_ids = np.zeros((BATCH, SEQ), np.int32)
_ids[:, :PROMPT] = _rng.integers(3, VOCAB, size=(BATCH, PROMPT))
INPUTS = {"token_ids": _ids, "padding_mask": np.arange(SEQ)[None, :].repeat(BATCH, 0) < PROMPT}


class _ArgmaxOfLogits(keras_hub.samplers.GreedySampler):
    """The greedy sampler without the softmax: argmax(softmax(x / T)) == argmax(x)."""

    def compute_probabilities(self, logits: Any) -> Any:
        return ops.cast(logits, "float32")


class _InPlaceCacheLM(GemmaCausalLM):
    """GemmaCausalLM whose ``call_with_cache`` writes each layer's new K/V into the stacked cache
    with one slice update, instead of slicing every layer out and re-stacking the whole cache."""

    def call_with_cache(self, token_ids: Any, cache: Any, cache_update_index: Any) -> Any:
        bb = self.backbone
        idx = cache_update_index
        x = bb.token_embedding(token_ids)
        x = x * ops.cast(ops.sqrt(bb.hidden_dim), x.dtype)
        for i, layer in enumerate(bb.transformer_layers):
            att = layer.attention
            nx = layer.pre_attention_norm(x)
            mask = layer._compute_attention_mask(nx, None, cache[:, i], idx)
            q = att._apply_rope(att.query_dense(nx), idx)
            k_up = att._apply_rope(att.key_dense(nx), idx)
            v_up = att.value_dense(nx)
            update = ops.expand_dims(ops.stack((k_up, v_up), axis=1), 1)
            cache = ops.slice_update(cache, [0, i, 0, idx, 0, 0], update)
            vec = att._compute_attention(q, cache[:, i, 0], cache[:, i, 1], mask,
                                         cache_update_index=idx)
            none = ops.all(ops.equal(mask, 0), axis=-1, keepdims=True)[..., None]
            vec = ops.where(none, ops.zeros_like(vec), vec)
            a = att.output_dense(vec)
            if layer.use_post_attention_norm:
                a = layer.post_attention_norm(a)
            ax = x + a
            nx = layer.pre_ffw_norm(ax)
            h = keras.activations.gelu(layer.gating_ffw(nx), approximate=True)
            h = layer.ffw_linear(h * layer.gating_ffw_2(nx))
            if layer.use_post_ffw_norm:
                h = layer.post_ffw_norm(h)
            x = h + ax
        hidden_states = x = bb.layer_norm(x)
        return bb.token_embedding(x, reverse=True), hidden_states, cache


class _HeadNoTransposeLM(GemmaCausalLM):
    """GemmaCausalLM whose tied LM head reads the [V, D] embedding as it is stored."""

    def call_with_cache(self, token_ids: Any, cache: Any, cache_update_index: Any) -> Any:
        emb = self.backbone.token_embedding
        real = emb.call
        emb.call = lambda x, reverse=False: (ops.einsum("...d,vd->...v", x, emb.embeddings)
                                             if reverse else real(x))
        try:
            return super().call_with_cache(token_ids, cache, cache_update_index)
        finally:
            del emb.call


class _PromptPrefillLM(GemmaCausalLM):
    """GemmaCausalLM whose prefill runs on the prompt positions only (FIELD_PROMPT, static)."""

    def _build_cache(self, token_ids: Any) -> Any:
        bb = self.backbone
        shape = [ops.shape(token_ids)[0], bb.num_layers, 2, ops.shape(token_ids)[1],
                 bb.num_key_value_heads, bb.head_dim]
        cache = ops.zeros(shape, dtype=self.compute_dtype)
        _, hidden_states, cache = self.call_with_cache(token_ids[:, :PROMPT], cache, 0)
        return hidden_states, cache


def _make(cls: type = GemmaCausalLM, sampler: Any = "greedy",
          loop_once: bool = False, eager: bool = EAGER) -> Callable[[], Any]:
    lm = cls(backbone=backbone, preprocessor=None)
    lm.compile(sampler=sampler, run_eagerly=eager)

    def run() -> Any:
        with loop_compiled_once() if loop_once else contextlib.nullcontext():
            return lm.generate(INPUTS, stop_token_ids=None)["token_ids"]

    return run


step = _make()
VARIANTS: dict[str, Callable[[], Any]] = {
    "baseline": step,
    "no-softmax": _make(sampler=_ArgmaxOfLogits()),
    "cache-in-place": _make(cls=_InPlaceCacheLM),
    "prefill-prompt-only": _make(cls=_PromptPrefillLM),
    "head-no-transpose": _make(cls=_HeadNoTransposeLM),
}
if EAGER:
    VARIANTS["loop-once"] = _make(loop_once=True)
    VARIANTS["jit-compile"] = _make(eager=False)


def tokens(out: Any) -> np.ndarray:
    """The greedy tokens of one call's output (for the equality check)."""
    return np.asarray(jax.device_get(out))



def variant_step() -> Any:
    """One call of the variant named by FIELD_VARIANT (a profile target for a what-if's op table)."""
    return VARIANTS[os.environ.get("FIELD_VARIANT", "baseline")]()
