"""``drop-round-trip``'s examples: code it must leave alone (VALID) and code with its fixed text
(INVALID). Each is a test (tests/fixes/test_catalog_examples.py) run through the real codemod.
"""

from __future__ import annotations

from hlo_doctor.fixes.source.base import Hint, SourceExample

# tests/fixes/programs/round_trip.py: a cast to the compute dtype and back before a matmul.
_CHAINED = '''\
import jax
import jax.numpy as jnp


@jax.jit
def project(x, w):
    h = x.astype(jnp.bfloat16).astype(jnp.float32)
    return h @ w
'''

# The narrowing bound to a name and widened back on the next line (HD007 names the narrowing).
_NAMED = '''\
import jax
import jax.numpy as jnp


@jax.jit
def head(x, w):
    h = (x @ w).astype(jnp.bfloat16)
    return h.astype(jnp.float32)
'''

_F32 = Hint(narrow_dtype="bf16", wide_dtype="f32")

VALID = (
    SourceExample(code=_NAMED.replace("return h.astype(jnp.float32)", "return h.astype(jnp.float32), h"), line=7,
                  hint=_F32, reason="read in bf16 at line 8", note="the bf16 value is returned too"),
    SourceExample(code=_NAMED.replace("return h.astype(jnp.float32)", "return jnp.tanh(h).astype(jnp.float32)"),
                  line=7, hint=_F32, reason="the narrow value is used", note="computed on in bf16 first"),
    SourceExample(code=_NAMED.replace("    return h.astype(jnp.float32)\n", ""), line=7, hint=_F32,
                  reason="never read", note="nothing widens it back"),
    SourceExample(code=_CHAINED, line=8, hint=_F32, kind="no-pattern", reason="holds no x.astype(bfloat16",
                  note="the line changed since the run"),
    SourceExample(code=_CHAINED, line=7, hint=Hint(narrow_dtype="bf16", wide_dtype="f64"), kind="no-pattern",
                  reason="the finding's in f64", note="not the finding's round trip"),
)

INVALID = (
    SourceExample(code=_CHAINED, line=7, hint=_F32, safe=False, fixed=_CHAINED.replace(
        "h = x.astype(jnp.bfloat16).astype(jnp.float32)", "h = x"),
        note="the finding says x is f32: both converts go"),
    SourceExample(code=_CHAINED, safe=False, fixed=_CHAINED.replace(
        "h = x.astype(jnp.bfloat16).astype(jnp.float32)", "h = x.astype(jnp.float32)"),
        note="whole file, no finding: the dtype of x is not known, the widening stays (a no-op on f32)"),
    SourceExample(code=_NAMED, line=7, hint=_F32, safe=False, fixed=_NAMED.replace(
        "h = (x @ w).astype(jnp.bfloat16)", "h = x @ w").replace("return h.astype(jnp.float32)", "return h"),
        note="bound to a name, widened back where it is read"),
)
