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
    f32-params        parameters stored in float32 (``param_dtype``), compute dtype unchanged
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
from recurrentgemma import common

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


def _sampler(param_dtype: Any) -> rg.Sampler:
    model = rg.Griffin(config, dtype=DTYPE, param_dtype=param_dtype)
    tokens = jnp.ones((1, 8), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), tokens, jnp.arange(8)[None])["params"]
    return rg.Sampler(model=model, vocab=_Vocab(), params=params)


def _make(sampler: rg.Sampler) -> Callable[[], Any]:
    def run() -> Any:
        out = sampler(PROMPTS, total_generation_steps=GEN, end_sampling_at_eos_token=False)
        return out.tokens

    return run


_base = _sampler(DTYPE)
step = _make(_base)
VARIANTS: dict[str, Callable[[], Any]] = {"baseline": step}


def tokens(out: Any) -> np.ndarray:
    """The greedy tokens of one call's output (for the equality check)."""
    return np.concatenate([np.asarray(t) for t in out])
