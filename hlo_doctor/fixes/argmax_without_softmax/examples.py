"""``argmax-without-softmax``'s examples: code it must leave alone (VALID) and code with its fixed text
(INVALID). Each is a test (tests/fixes/test_catalog_examples.py) run through the real codemod.
"""

from __future__ import annotations

from hlo_doctor.fixes.source.base import SourceExample

# tests/rules/programs/greedy_softmax.py's sampler (keras-hub's GreedySampler in one function).
_SOFTMAX = '''\
import jax
import jax.numpy as jnp


@jax.jit
def sample(logits, temperature):
    probs = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    return jnp.argmax(probs, axis=-1)
'''

# recurrentgemma's soft cap (griffin.py: c * tanh(x / c)) before a greedy argmax.
_SOFT_CAP = '''\
import jax.numpy as jnp


def greedy(logits):
    logits = 30.0 * jnp.tanh(logits / 30.0)
    return jnp.argmax(logits, -1)
'''

VALID = (
    SourceExample(code=_SOFTMAX.replace("    return jnp.argmax(probs, axis=-1)\n",
                                        "    return jnp.argmax(probs, axis=-1), probs\n"),
                  line=7, reason="also read at line 8", note="the probabilities are returned too"),
    SourceExample(code=_SOFTMAX.replace("jnp.argmax(probs, axis=-1)", "jnp.argmax(probs)"), line=7,
                  reason="flattened array", note="an argmax over the flattened array: softmax is per row"),
    SourceExample(code=_SOFTMAX.replace("axis=-1)\n    return", "axis=0)\n    return"), line=7,
                  reason="softmax runs over axis 0, the argmax over axis -1", note="softmax and argmax on other axes"),
    SourceExample(code=_SOFT_CAP.replace("30.0 * jnp.tanh(logits / 30.0)", "jnp.tanh(logits / -2.0)"), line=5,
                  reason="not positive", note="a negative scale reverses the order"),
    SourceExample(code='''\
import keras
from keras import ops


class Sampler:
    def compute_probabilities(self, logits):
        logits = ops.cast(logits, "float32")
        return keras.activations.softmax(logits / self.temperature)
''', line=8, reason="returns the values of the map (softmax",
                  note="keras-hub 0.32's Sampler.compute_probabilities: other samplers read the probabilities"),
    SourceExample(code=_SOFTMAX, line=5, kind="no-pattern", reason="holds no softmax",
                  note="the line changed since the run: the def line holds no map"),
    SourceExample(code='''\
import jax


def top(logits):
    values, idx = jax.lax.top_k(jax.nn.softmax(logits), 4)
    return values, idx
''', line=5, reason="values top_k selects are read", note="top_k's probabilities are used"),
)

INVALID = (
    SourceExample(code=_SOFTMAX, line=7, safe=False, fixed=_SOFTMAX.replace(
        "    probs = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)\n", "").replace(
        "argmax(probs", "argmax(logits"), note="softmax(widen(x) / T) then argmax: the argmax of the logits"),
    SourceExample(code=_SOFTMAX, line=8, safe=False, fixed=_SOFTMAX.replace(
        "    probs = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)\n", "").replace(
        "argmax(probs", "argmax(logits"), note="the same, named by the argmax's line"),
    SourceExample(code=_SOFT_CAP, line=5, safe=False,
                  fixed=_SOFT_CAP.replace("    logits = 30.0 * jnp.tanh(logits / 30.0)\n", ""),
                  note="a tanh soft cap before the argmax"),
    SourceExample(code='''\
import jax


def top(logits):
    _, idx = jax.lax.top_k(jax.nn.log_softmax(logits, axis=-1), 4)
    return idx
''', line=5, safe=False, fixed='''\
import jax


def top(logits):
    _, idx = jax.lax.top_k(logits, 4)
    return idx
''', note="top_k of a log_softmax, only the indices kept"),
    SourceExample(code='''\
import jax.numpy as jnp


def pick(x):
    return jnp.exp(x).argmax(axis=-1)
''', safe=False, fixed='''\
import jax.numpy as jnp


def pick(x):
    return x.argmax(axis=-1)
''', note="the method form, whole file"),
)
