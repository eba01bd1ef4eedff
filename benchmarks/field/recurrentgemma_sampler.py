"""recurrentgemma's own ``Sampler`` (greedy: jitted prefill, then a jitted ``lax.while_loop``) on a
tiny random Griffin (two recurrent blocks, one local-attention block).

A profile target (``hlo-doctor profile benchmarks/field/recurrentgemma_sampler.py:step``) and a
what-if subject (``benchmarks/field/whatif.py benchmarks/field/recurrentgemma_sampler.py``). The
same approach as ``benchmarks/recurrentgemma_sampler.py``, configurable. Nothing is downloaded:
random parameters from ``model.init``, and a byte-level stand-in for the SentencePiece vocabulary.

Environment (read once, at import):

    FIELD_VOCAB   vocabulary size (default 256000, Gemma's)
    FIELD_GEN     total_generation_steps (default 16)
    FIELD_WINDOW  attention_window_size = the attention block's KV-cache length (default 64)
    FIELD_BATCH   prompts per call (default 8)
    FIELD_HIDDEN  width (default 256)
    FIELD_DTYPE   bfloat16 | float32, the model's and parameters' dtype (default bfloat16)

Variants (``VARIANTS``), each the same loop with one waste removed (see docs/field.md):

    baseline          recurrentgemma as shipped
    f32-embedding     the bf16 embedding table kept as an exact float32 copy made once, and the
                      LM head computed as XLA:CPU computes a bf16 dot (f32 operands, f32 dot,
                      result rounded to bf16): XLA:CPU no longer widens and transposes the
                      [V, D] table on every call (it has no bf16 dot: it converts the operands)
    no-softcap        the logits soft cap (``tanh(x / c) * c``, monotone) is not applied: the
                      sampler only argmaxes the logits (FIELD_DTYPE=bfloat16 rounds them, so
                      ties can break differently: the token check says whether they did)
    f32-model         (FIELD_DTYPE=bfloat16) recurrentgemma's own settings instead of a patch:
                      ``Griffin(config, dtype=float32, param_dtype=float32)`` and the same
                      parameters cast to float32 once: on XLA:CPU, which has no bf16 dot, nothing
                      is widened per call (float32 compute: tokens may differ)
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import recurrentgemma
import recurrentgemma.jax as rg
from flax.linen import module as linen_module
from recurrentgemma import common
from recurrentgemma.jax import modules

VOCAB = int(os.environ.get("FIELD_VOCAB", "256000"))
GEN = int(os.environ.get("FIELD_GEN", "16"))
WINDOW = int(os.environ.get("FIELD_WINDOW", "64"))
BATCH = int(os.environ.get("FIELD_BATCH", "8"))
HIDDEN = int(os.environ.get("FIELD_HIDDEN", "256"))
DTYPE = jnp.dtype(os.environ.get("FIELD_DTYPE", "bfloat16"))
CONFIG = {"vocab": VOCAB, "gen": GEN, "window": WINDOW, "batch": BATCH, "hidden": HIDDEN,
          "dtype": DTYPE.name, "recurrentgemma": getattr(recurrentgemma, "__version__", "1.0.1")}


class _Vocab:
    """Stands in for the SentencePiece vocabulary (no model file here): ids are bytes + 3."""

    def pad_id(self) -> int:
        return 0

    def bos_id(self) -> int:
        return 2

    def eos_id(self) -> int:
        return 1

    def EncodeAsIds(self, s: str) -> list[int]:  # noqa: N802 (SentencePiece's name)
        return [b + 3 for b in s.encode()]

    def DecodeIds(self, ids: list[int]) -> str:  # noqa: N802
        return ""


config = common.GriffinConfig(
    vocab_size=VOCAB, width=HIDDEN, mlp_expanded_width=3 * HIDDEN, num_heads=4,
    block_types=(common.TemporalBlockType.RECURRENT, common.TemporalBlockType.RECURRENT,
                 common.TemporalBlockType.ATTENTION),
    embeddings_scale_by_sqrt_dim=True, attention_window_size=WINDOW, logits_soft_cap=30.0)
PROMPTS = ["the quick brown fox", "jumps over the lazy dog"] * (BATCH // 2) + \
    ["hello"] * (BATCH % 2)


_F32_HEAD = {"on": False}


def _patch_decode() -> None:
    """Embedder.decode that, while _F32_HEAD is on (at trace time), multiplies by a float32 table
    in float32 and rounds the logits to the compute dtype, as XLA:CPU does for a bf16 dot."""
    original = modules.Embedder.decode.__wrapped__

    def decode(self: Any, x: Any) -> Any:
        if not _F32_HEAD["on"]:
            return original(self, x)
        table = self.input_embedding_table
        logits = jnp.dot(x.astype(jnp.float32), table.astype(jnp.float32).T)
        return logits.astype(self.dtype)

    modules.Embedder.decode = linen_module.wrap_method_once(decode)


_patch_decode()


def _params(cfg: common.GriffinConfig) -> Any:
    model = rg.Griffin(cfg, dtype=DTYPE, param_dtype=DTYPE)
    tokens = jnp.ones((1, 8), jnp.int32)
    return model, model.init(jax.random.PRNGKey(0), tokens, jnp.arange(8)[None])["params"]


def _make(sampler: rg.Sampler, f32_head: bool = False) -> Callable[[], Any]:
    def run() -> Any:
        _F32_HEAD["on"] = f32_head
        try:
            out = sampler(PROMPTS, total_generation_steps=GEN, end_sampling_at_eos_token=False)
        finally:
            _F32_HEAD["on"] = False
        return out.tokens

    return run


_model, _base_params = _params(config)
step = _make(rg.Sampler(model=_model, vocab=_Vocab(), params=_base_params))
# The same parameters; the table stored as its exact float32 copy (made once, here).
_params32 = dict(_base_params, embedder={
    "input_embedding": _base_params["embedder"]["input_embedding"].astype(jnp.float32)})
_nocap = rg.Griffin(config._replace(logits_soft_cap=None), dtype=DTYPE,
                    param_dtype=DTYPE)
_model32 = rg.Griffin(config, dtype=jnp.float32, param_dtype=jnp.float32)
_all32 = jax.tree.map(lambda p: p.astype(jnp.float32), _base_params)
VARIANTS: dict[str, Callable[[], Any]] = {
    "baseline": step,
    "f32-model": _make(rg.Sampler(model=_model32, vocab=_Vocab(), params=_all32)),
    "f32-embedding": _make(rg.Sampler(model=_model, vocab=_Vocab(), params=_params32),
                           f32_head=True),
    "no-softcap": _make(rg.Sampler(model=_nocap, vocab=_Vocab(), params=_base_params)),
}


def tokens(out: Any) -> np.ndarray:
    """The greedy tokens of one call's output (for the equality check)."""
    return np.concatenate([np.asarray(t) for t in out])


def variant_step() -> Any:
    """One call of the variant named by FIELD_VARIANT (a profile target for a what-if's op table)."""
    return VARIANTS[os.environ.get("FIELD_VARIANT", "baseline")]()
