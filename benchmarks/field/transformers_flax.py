"""transformers' Flax ``generate(do_sample=False)`` (greedy search) on a tiny random GPT-2 or Gemma.

A profile target (``hlo-doctor profile benchmarks/field/transformers_flax.py:step``) and a what-if
subject (``benchmarks/field/whatif.py benchmarks/field/transformers_flax.py``). transformers 4.x
(Flax was dropped in 5.0); the model is built from a config with random weights, nothing is
downloaded.

Environment (read once, at import):

    FIELD_MODEL   gpt2 | gemma (default gpt2)
    FIELD_VOCAB   vocabulary size (default 50257 for gpt2, 256000 for gemma)
    FIELD_SEQ     max_length = KV-cache length (default 32)
    FIELD_PROMPT  prompt tokens; generate() adds FIELD_SEQ - FIELD_PROMPT tokens (default 16)
    FIELD_BATCH   batch size (default 1)
    FIELD_LAYERS  decoder layers (default 2)
    FIELD_HIDDEN  hidden width (default 128)
    FIELD_DTYPE   float32 | bfloat16: the model's compute dtype and its parameters' (default float32)
    FIELD_JIT     1: ``jax.jit`` around generate() (input ids -> sequences); 0: generate() called
                  as the library's docs show, eagerly (default 0)

Variants (``VARIANTS``), each the same loop with one waste removed:

    baseline        transformers as shipped
    head-last-only  the LM head is applied to the last position only (greedy search keeps
                    ``logits[:, -1]``; the prefill computes it for every prompt position)
    cache-once      ``init_cache`` (a full ``module.init``: random init of every parameter and a
                    forward pass, of which only the zero cache is kept) runs once, not every call
    loop-once       the ``lax.while_loop`` of greedy search is compiled once, not on every eager
                    call (its body and cond are fresh closures each call)
    conv1d-no-transpose  (gpt2) ``FlaxConv1D`` contracts its [out, in] kernel on ``in`` directly
                    instead of ``kernel.transpose()`` on every call (inside the decode loop: on
                    every iteration)
    jit-generate    (FIELD_JIT=0 only) the library used as its Flax docs allow instead of a patch:
                    ``jax.jit`` around ``generate()`` (parameters as an argument), so greedy
                    search's loop is compiled once and ``init_cache``'s ``module.init`` is traced
                    into the program, where XLA removes it as dead code
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fieldlib import loop_compiled_once  # noqa: E402

MODEL = os.environ.get("FIELD_MODEL", "gpt2")
VOCAB = int(os.environ.get("FIELD_VOCAB", "50257" if MODEL == "gpt2" else "256000"))
SEQ = int(os.environ.get("FIELD_SEQ", "32"))
PROMPT = int(os.environ.get("FIELD_PROMPT", "16"))
BATCH = int(os.environ.get("FIELD_BATCH", "1"))
LAYERS = int(os.environ.get("FIELD_LAYERS", "2"))
HIDDEN = int(os.environ.get("FIELD_HIDDEN", "128"))
DTYPE = jnp.dtype(os.environ.get("FIELD_DTYPE", "float32"))
JIT = os.environ.get("FIELD_JIT", "0") == "1"
CONFIG = {"model": MODEL, "vocab": VOCAB, "seq": SEQ, "prompt": PROMPT, "batch": BATCH,
          "layers": LAYERS, "hidden": HIDDEN, "dtype": DTYPE.name, "jit": JIT,
          "transformers": transformers.__version__}

if MODEL == "gpt2":
    from transformers.models.gpt2 import modeling_flax_gpt2 as _lib

    _config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=max(SEQ, 64), n_embd=HIDDEN,
                                      n_layer=LAYERS, n_head=4, bos_token_id=0, eos_token_id=0)
    _Model, _Module = _lib.FlaxGPT2LMHeadModel, _lib.FlaxGPT2LMHeadModule
    _body = "transformer"
else:
    from transformers.models.gemma import modeling_flax_gemma as _lib

    _config = transformers.GemmaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=1,
        head_dim=HIDDEN // 4, max_position_embeddings=max(SEQ, 64), bos_token_id=2,
        eos_token_id=1, pad_token_id=0)
    _Model, _Module = _lib.FlaxGemmaForCausalLM, _lib.FlaxGemmaForCausalLMModule
    _body = "model"
_EMBED = "wte" if MODEL == "gpt2" else "embed_tokens"

model = _Model(_config, seed=0, dtype=DTYPE)
if DTYPE != jnp.float32:
    model.params = jax.tree.map(lambda p: p.astype(DTYPE), model.params)

_rng = np.random.default_rng(0)
INPUT_IDS = jnp.asarray(_rng.integers(3, VOCAB, size=(BATCH, PROMPT)), jnp.int32)
# An id the model never emits: greedy search then always runs to max_length.
_KW = {"max_length": SEQ, "do_sample": False, "pad_token_id": 0, "eos_token_id": VOCAB}


class _LastOnlyModule(_Module):  # type: ignore[misc, valid-type]
    """The causal-LM module with the LM head applied to the last position only."""

    def __call__(self, input_ids: Any, *args: Any, **kw: Any) -> Any:
        # The body module takes the same arguments, in the same order, as the LM-head module.
        body = getattr(self, _body)
        outputs = body(input_ids, *args, **kw)
        hidden = outputs[0][:, -1:]
        kernel = body.variables["params"][_EMBED]["embedding"].T
        logits = self.lm_head.apply({"params": {"kernel": kernel}}, hidden)
        if isinstance(outputs, tuple):
            return (logits,) + outputs[1:]
        return _lib.FlaxCausalLMOutputWithCrossAttentions(logits=logits) if MODEL == "gpt2" \
            else _lib.FlaxCausalLMOutput(logits=logits)


class _LastOnlyModel(_Model):  # type: ignore[misc, valid-type]
    module_class = _LastOnlyModule


class _CacheOnceModel(_Model):  # type: ignore[misc, valid-type]
    """init_cache memoised: the zero cache of one (batch, length) is built once."""

    _caches: dict[tuple[int, int], Any] = {}

    def init_cache(self, batch_size: int, max_length: int) -> Any:
        key = (batch_size, max_length)
        if key not in self._caches:
            self._caches[key] = super().init_cache(batch_size, max_length)
        return self._caches[key]


_NO_TRANSPOSE = {"on": False}


def _patch_conv1d() -> None:
    """FlaxConv1D.__call__ that, while _NO_TRANSPOSE is on (at trace time), contracts the stored
    [out, in] kernel on its second axis instead of transposing it first."""
    from flax.linen import module as linen_module
    from jax import lax

    original = _lib.FlaxConv1D.__call__.__wrapped__

    def call(self: Any, inputs: Any) -> Any:
        if not _NO_TRANSPOSE["on"]:
            return original(self, inputs)
        inputs = jnp.asarray(inputs, self.dtype)
        kernel = self.param("kernel", jax.nn.initializers.normal(stddev=0.02),
                            (self.features, inputs.shape[-1]))
        kernel = jnp.asarray(kernel, self.dtype)
        y = lax.dot_general(inputs, kernel, (((inputs.ndim - 1,), (1,)), ((), ())),
                            precision=self.precision)
        if self.use_bias:
            y = y + jnp.asarray(self.param("bias", jax.nn.initializers.zeros, (self.features,)),
                                self.dtype)
        return y

    call.compact = True  # type: ignore[attr-defined]
    _lib.FlaxConv1D.__call__ = linen_module.wrap_method_once(call)


def _make(m: Any, loop_once: bool = False, no_transpose: bool = False,
          jit: bool = JIT) -> Callable[[], Any]:
    params = model.params

    def generate(ids: Any, params: Any) -> Any:
        return m.generate(ids, params=params, **_KW).sequences

    # Parameters are arguments of the jitted program (not constants folded into it).
    fn = jax.jit(generate) if jit else generate

    def run() -> Any:
        _NO_TRANSPOSE["on"] = no_transpose
        try:
            with loop_compiled_once() if loop_once else contextlib.nullcontext():
                return fn(INPUT_IDS, params)
        finally:
            _NO_TRANSPOSE["on"] = False

    return run


def _twin(cls: type) -> Any:
    return cls(_config, dtype=DTYPE, _do_init=False)


step = _make(model)
VARIANTS: dict[str, Callable[[], Any]] = {
    "baseline": step,
    "head-last-only": _make(_twin(_LastOnlyModel)),
    "cache-once": _make(_twin(_CacheOnceModel)),
}
if not JIT:
    VARIANTS["loop-once"] = _make(_twin(_Model), loop_once=True)
    VARIANTS["jit-generate"] = _make(_twin(_Model), jit=True)
if MODEL == "gpt2":
    _patch_conv1d()
    VARIANTS["conv1d-no-transpose"] = _make(_twin(_Model), no_transpose=True)


def tokens(out: Any) -> np.ndarray:
    """The greedy tokens of one call's output (for the equality check)."""
    return np.asarray(jax.device_get(out))


def variant_step() -> Any:
    """One call of the variant named by FIELD_VARIANT (a profile target for a what-if's op table)."""
    return VARIANTS[os.environ.get("FIELD_VARIANT", "baseline")]()
