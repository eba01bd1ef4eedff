"""``widen-weights-once``'s examples: code it must leave alone (VALID) and code with its fixed text
(INVALID). Each is a test (tests/fixes/test_catalog_examples.py) run through the real codemod.
"""

from __future__ import annotations

from hlo_doctor.fixes.source.base import SourceExample

# tests/rules/programs/invariant_work.py's decode step: a bf16 table widened (and read transposed)
# on every call.
_DECODE = '''\
import jax
import jax.numpy as jnp

PARAMS = {"emb": jnp.ones((64, 8), jnp.bfloat16), "w": jnp.ones((8, 8), jnp.bfloat16)}


@jax.jit
def decode(params, x):
    h = jnp.tanh(x @ params["w"].astype(jnp.float32))
    logits = h @ params["emb"].T.astype(jnp.float32)
    return jnp.argmax(logits, -1)


def step(x):
    return decode(PARAMS, x)
'''

_FIXED = _DECODE.replace(
    '"w": jnp.ones((8, 8), jnp.bfloat16)}\n',
    '"w": jnp.ones((8, 8), jnp.bfloat16)}\n'
    'PARAMS_F32 = {**PARAMS, "w": PARAMS["w"].astype(jnp.float32), "emb": PARAMS["emb"].astype(jnp.float32)}\n'
).replace("decode(PARAMS, x)", "decode(PARAMS_F32, x)")

_NESTED = '''\
import jax
import jax.numpy as jnp

PARAMS = {"embedder": {"table": jnp.ones((64, 8), jnp.bfloat16), "scale": 2.0}}


@jax.jit
def head(params, h):
    return h @ params["embedder"]["table"].transpose().astype("float32")


def run(h):
    return head(PARAMS, h), head(PARAMS, h + 1)
'''

# transformers 4.57's FlaxConv1D (models/gpt2/modeling_flax_gpt2.py:120), cut down: the kernel is a
# flax parameter of the module, transposed and converted on every call.
_CONV1D = '''\
import jax.numpy as jnp
import flax.linen as nn


class FlaxConv1D(nn.Module):
    @nn.compact
    def __call__(self, inputs):
        kernel = self.param("kernel", nn.initializers.normal(0.02), (self.features, inputs.shape[-1]))
        kernel = jnp.asarray(kernel.transpose(), self.dtype)
        return inputs @ kernel
'''

# recurrentgemma 1.0.1's Embedder.decode (jax/modules.py:937-940): the table is a module attribute.
_EMBEDDER = '''\
import flax.linen as nn


class Embedder(nn.Module):
    def decode(self, x):
        x, embedding_table = nn.dtypes.promote_dtype(x, self.input_embedding_table, dtype=self.dtype)
        return x @ embedding_table.T
'''

VALID = (
    SourceExample(code=_DECODE.replace("    return jnp.argmax(logits, -1)\n",
                                       "    return jnp.argmax(logits + params[\"emb\"][0, 0], -1)\n"),
                  line=10, reason="params is read at line 11 other than widened",
                  note="a bf16 entry read as such would turn f32"),
    SourceExample(code=_DECODE.replace("decode(PARAMS, x)", "decode(load(), x)"), line=10,
                  reason="passes load() for params", note="the weights come from a call: loaded elsewhere"),
    SourceExample(code=_DECODE + "\n\nPARAMS[\"w\"] = PARAMS[\"w\"] * 2\n", line=10, reason="PARAMS is changed at line 18",
                  note="the dict is changed after it is bound"),
    SourceExample(code=_DECODE.replace("@jax.jit\n", ""), line=9, reason="not jitted in this file",
                  note="a function jitted elsewhere"),
    SourceExample(code=_EMBEDDER, line=6, reason="self.input_embedding_table, a module's attribute",
                  note="recurrentgemma: the table is the module's parameter"),
    SourceExample(code=_CONV1D, line=9, reason="kernel, bound from self.param(",
                  note="GPT-2's Conv1D: the kernel comes from self.param, converted by jnp.asarray to self.dtype"),
)

INVALID = (
    SourceExample(code=_DECODE, line=10, fixed=_FIXED,
                  note="both entries the step widens, widened once after the dict; the call passes the copy"),
    SourceExample(code=_DECODE, fixed=_FIXED, note="whole file: one edit for the step's two casts"),
    SourceExample(code=_NESTED, line=9, fixed=_NESTED.replace(
        '"scale": 2.0}}\n',
        '"scale": 2.0}}\n'
        'PARAMS_F32 = {**PARAMS, "embedder": {**PARAMS["embedder"], "table": PARAMS["embedder"]["table"].astype("float32")}}\n'
    ).replace("head(PARAMS, h)", "head(PARAMS_F32, h)").replace("head(PARAMS, h + 1)", "head(PARAMS_F32, h + 1)"),
        note="a nested entry, transpose() kept in the step, a dtype as a string, two calls"),
)
