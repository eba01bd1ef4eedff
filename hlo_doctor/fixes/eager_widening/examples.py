"""``eager-widening``'s examples: code it must leave alone (VALID) and code with its fixed text (INVALID).

Each is a test (tests/fixes/test_catalog_examples.py) run through the real codemod.
"""

from __future__ import annotations

from hlo_doctor.fixes.source.base import Hint, SourceExample

_BF16 = Hint(narrow_dtype="bf16", wide_dtype="f32")

# tests/profile_programs/sampler_step.py's shape: an eager astype, then a jitted greedy sampler.
_ONLY_ARGMAX = '''\
import jax
import jax.numpy as jnp


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1)


def step(logits):
    # The model's logits are bf16.
    logits = logits.astype(jnp.float32)
    return sample(logits)
'''

_RETURNS_INPUT = '''\
import jax
import jax.numpy as jnp


@jax.jit
def sample(logits):
    """Greedy: the token and the logits."""
    return jnp.argmax(logits, axis=-1), logits


def step(logits):
    return sample(logits.astype(jnp.float32))
'''

_EAGER_ARGMAX = '''\
import jax.numpy as jnp


def greedy(logits):
    wide = jnp.asarray(logits, dtype=jnp.float32)
    return jnp.argmax(wide, -1)
'''

_WIDENS_INSIDE = '''\
import jax
import jax.numpy as jnp


@jax.jit
def logprobs(logits):
    logits = logits.astype(jnp.float32)
    return jax.nn.log_softmax(logits, axis=-1)


def step(logits):
    return logprobs(logits.astype(jnp.float32))
'''

VALID = (
    SourceExample(code=_ONLY_ARGMAX.replace("    return sample(logits)\n", "    return sample(logits), logits\n"),
                  line=12, hint=_BF16, reason="also read at line 13",
                  note="the widened logits are returned too"),
    SourceExample(code=_ONLY_ARGMAX.replace("@jax.jit\n", ""), line=11, hint=_BF16,
                  reason="not jitted in this file", note="the reader is not a jitted function of this file"),
    SourceExample(code=_ONLY_ARGMAX, line=13, hint=_BF16, kind="no-pattern", reason="holds no widening",
                  note="the line changed since the run: no widening there"),
    SourceExample(code=_ONLY_ARGMAX.replace("jnp.float32", "jnp.int32"), line=12, hint=_BF16, kind="no-pattern",
                  reason="holds no widening", note="a cast to an integer is not a widening"),
    SourceExample(code=_EAGER_ARGMAX.replace("return jnp.argmax(wide, -1)", "return jnp.argmax(wide, -1), wide.sum()"),
                  line=5, hint=_BF16, reason="also read at line 6", note="the wide value is also summed"),
)

INVALID = (
    SourceExample(code=_ONLY_ARGMAX, line=12, hint=_BF16,
                  fixed=_ONLY_ARGMAX.replace("    logits = logits.astype(jnp.float32)\n", ""),
                  note="the jitted reader only argmaxes: the widening goes (the comment stays)"),
    SourceExample(code=_ONLY_ARGMAX.replace("    # The model's logits are bf16.\n",
                                            "    # The model's logits are bf16.\n    # eager widening convert\n"),
                  line=13, hint=_BF16, fixed=_ONLY_ARGMAX.replace("    logits = logits.astype(jnp.float32)\n", ""),
                  note="a comment that describes the widening goes with it; the one about the input stays"),
    SourceExample(code=_WIDENS_INSIDE.replace("logprobs(logits.astype(jnp.float32))\n",
                                              "logprobs(logits.astype(jnp.float32))  # widen for the log-softmax\n"),
                  line=12, fixed=_WIDENS_INSIDE.replace("logprobs(logits.astype(jnp.float32))", "logprobs(logits)"),
                  note="a trailing comment on the widening goes with it where the call is replaced in place"),
    SourceExample(code=_RETURNS_INPUT, line=12, hint=_BF16, safe=False, fixed=_RETURNS_INPUT.replace(
        '    """Greedy: the token and the logits."""\n',
        '    """Greedy: the token and the logits."""\n    logits = logits.astype(jnp.float32)\n').replace(
        "sample(logits.astype(jnp.float32))", "sample(logits)"),
        note="the jitted reader returns the logits: the widening moves inside it (unsafe)"),
    SourceExample(code=_EAGER_ARGMAX, line=5, hint=_BF16,
                  fixed=_EAGER_ARGMAX.replace("    wide = jnp.asarray(logits, dtype=jnp.float32)\n", "").replace(
                      "argmax(wide", "argmax(logits"),
                  note="jnp.asarray(x, dtype) read only by an eager argmax"),
    SourceExample(code=_EAGER_ARGMAX, line=5, safe=False,
                  fixed=_EAGER_ARGMAX.replace("    wide = jnp.asarray(logits, dtype=jnp.float32)\n", "").replace(
                      "argmax(wide", "argmax(logits"),
                  note="without a finding the dtype widened from is unknown: unsafe"),
    SourceExample(code=_WIDENS_INSIDE, line=12, fixed=_WIDENS_INSIDE.replace(
        "logprobs(logits.astype(jnp.float32))", "logprobs(logits)"),
        note="the jitted reader widens its parameter itself first: the eager copy goes"),
)
