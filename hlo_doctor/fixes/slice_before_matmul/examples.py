"""``slice-before-matmul``'s examples: code it must leave alone (VALID) and code with its fixed text
(INVALID). Each is a test (tests/fixes/test_catalog_examples.py) run through the real codemod.
"""

from __future__ import annotations

from hlo_doctor.fixes.source.base import Hint, SourceExample

# tests/rules/programs/prefill_logits.py: the LM head over every position, the last one kept.
_PREFILL = '''\
import jax
import jax.numpy as jnp


@jax.jit
def prefill(h, w):
    logits = h @ w
    return jnp.argmax(logits[:, -1], axis=-1)
'''

_RANK3 = Hint(rank=3)

VALID = (
    SourceExample(code=_PREFILL.replace("return jnp.argmax(logits[:, -1], axis=-1)",
                                        "return jnp.argmax(logits[:, -1], axis=-1), logits"),
                  line=7, hint=_RANK3, reason="read whole at line 8", note="every position's logits are returned"),
    SourceExample(code=_PREFILL, line=7, hint=Hint(rank=2), reason="reaches the matmul's last dimension",
                  note="a rank-2 result: [:, -1] selects a column of W, not a row of x"),
    SourceExample(code=_PREFILL, line=7, reason="rank of the matmul's result is not known",
                  note="no finding to say the rank"),
    SourceExample(code=_PREFILL.replace("logits[:, -1]", "logits[:, n]").replace("(h, w)", "(h, w, n)"), line=7,
                  hint=_RANK3, reason="n is not a constant integer", note="a dynamic index"),
    SourceExample(code=_PREFILL.replace("return jnp.argmax(logits[:, -1], axis=-1)",
                                        "return jnp.argmax(logits[:, -1], axis=-1), logits[:, 0]"),
                  line=7, hint=_RANK3, reason="different subscripts", note="two different slices"),
    SourceExample(code=_PREFILL, line=5, hint=_RANK3, kind="no-pattern", reason="holds no matmul",
                  note="the line changed since the run"),
)

INVALID = (
    SourceExample(code=_PREFILL, line=7, hint=_RANK3, safe=False, fixed=_PREFILL.replace(
        "logits = h @ w", "logits = h[:, -1] @ w").replace("logits[:, -1]", "logits"),
        note="the named matmul and its one subscript: the rank kept"),
    SourceExample(code='''\
import jax.numpy as jnp


def head(x, w):
    return jnp.argmax((x @ w)[:, -1, :], -1)
''', safe=False, fixed='''\
import jax.numpy as jnp


def head(x, w):
    return jnp.argmax(x[:, -1, :] @ w, -1)
''', note="inline, whole file: the index ends with ':', so the rank does not matter"),
    SourceExample(code='''\
import jax.numpy as jnp


def head(x, w):
    return jnp.dot(x + 1, w)[:, -1] * 2
''', line=5, hint=_RANK3, safe=False, fixed='''\
import jax.numpy as jnp


def head(x, w):
    return jnp.dot((x + 1)[:, -1], w) * 2
''', note="jnp.dot of an expression: parenthesised before the index"),
)
