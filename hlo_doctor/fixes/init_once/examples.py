"""``init-once``'s examples: code it must leave alone (VALID) and code with its fixed text (INVALID).
Each is a test (tests/fixes/test_catalog_examples.py) run through the real codemod.
"""

from __future__ import annotations

from hlo_doctor.fixes.source.base import SourceExample

# tests/rules/programs/invariant_work.py's TinyLM, built like transformers' Flax models (cut down):
# generate() calls init_cache(), which runs the whole init to keep a zero cache.
_MODEL = '''\
import jax
import jax.numpy as jnp


class TinyLM:
    def init(self, key, ids):
        params = {"emb": jax.random.normal(key, (64, 8))}
        return {"params": params, "cache": jnp.zeros_like(params["emb"][ids])}

    def init_cache(self, batch, length):
        return self.init(jax.random.PRNGKey(0), jnp.ones((batch, length), jnp.int32))["cache"]

    def generate(self, tok, batch=2, length=4):
        cache = self.init_cache(batch, length)
        return tok + cache.sum()
'''

_FIXED = _MODEL.replace("import jax\n", "import functools\nimport jax\n").replace(
    "    def init_cache(self, batch, length):", "    @functools.cache\n    def init_cache(self, batch, length):")

# transformers 4.57's FlaxGPT2PreTrainedModel.init_cache and the LM head's
# prepare_inputs_for_generation (models/gpt2/modeling_flax_gpt2.py:437-454, 749), cut down.
_TRANSFORMERS = '''\
import jax
import jax.numpy as jnp
from flax.core.frozen_dict import unfreeze


class FlaxGPT2PreTrainedModel:
    def init_cache(self, batch_size, max_length):
        input_ids = jnp.ones((batch_size, max_length))
        init_variables = self.module.init(jax.random.PRNGKey(0), input_ids, init_cache=True)
        return unfreeze(init_variables["cache"])


class FlaxGPT2LMHeadModel(FlaxGPT2PreTrainedModel):
    def prepare_inputs_for_generation(self, input_ids, max_length):
        batch_size, seq_length = input_ids.shape
        past_key_values = self.init_cache(batch_size, max_length)
        return {"past_key_values": past_key_values}
'''

VALID = (
    SourceExample(code=_MODEL.replace("cache = self.init_cache(batch, length)", "cache = self.make_cache(batch)"),
                  line=14, kind="no-pattern", reason="calls no initialiser", note="make_cache is not an initialiser name"),
    SourceExample(code=_MODEL.replace("self.init_cache(batch, length)", "self.init(key, tok)").replace(
        "def generate(self, tok,", "def generate(self, tok, key,"), line=14, reason="takes a random key (key)",
        note="the caller passes the key: each call may draw other values"),
    SourceExample(code=_MODEL.replace("jax.random.PRNGKey(0), jnp.ones", "jax.random.PRNGKey(self.seed), jnp.ones"),
                  line=14, reason="not a constant", note="the key comes from the instance"),
    SourceExample(code=_MODEL.replace('        return self.init(jax', '        self.cached = True\n        return self.init(jax'),
                  line=15, reason="sets self.cached", note="the initialiser changes the instance"),
    SourceExample(code=_MODEL.replace("    def init_cache(self, batch, length):\n        return self.init(jax.random."
                                      "PRNGKey(0), jnp.ones((batch, length), jnp.int32))[\"cache\"]\n\n", ""),
                  line=11, reason="not defined in this file", note="the initialiser is inherited from another file"),
    SourceExample(code=_FIXED, line=16, kind="already-applied", reason="already cached", note="applied before"),
)

INVALID = (
    SourceExample(code=_MODEL, line=14, safe=False, fixed=_FIXED,
                  note="the call in generate(): init_cache cached (import functools added)"),
    SourceExample(code=_MODEL, safe=False, fixed=_FIXED, note="whole file: the one call outside a constructor"),
    SourceExample(code=_TRANSFORMERS, line=16, safe=False, fixed=_TRANSFORMERS.replace(
        "import jax\n", "import functools\nimport jax\n").replace(
        "    def init_cache(self, batch_size, max_length):",
        "    @functools.cache\n    def init_cache(self, batch_size, max_length):"),
        note="transformers' GPT-2: the initialiser is defined on the base class in the same file"),
)
