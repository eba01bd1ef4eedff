"""Programs that hold memory they need not, and the same programs without the waste (HD018, HD019).

- ``prefill``: the LM head applied to every prompt position, the last one's logits returned
  (``(h @ w)[:, -1]``); ``prefill_fixed`` slices first (``h[:, -1] @ w``).
- ``prefill_argmax``: the same at batch 16, the argmax of the last position read (the slice fused
  into it: the fix holds the last position's logits); ``prefill_argmax_fixed``.
- ``project``: a weight whose halves are interleaved on every call before the matmul reads it;
  ``project_fixed`` reads it stored reordered (the same bytes, once).
- ``widen``: a bf16 weight widened to f32 on every call; ``widen_fixed`` reads it stored in f32.
- ``top_sorted``: int8 scores widened to int32 and then sorted (a temporary twin of the argument);
  ``top_sorted_fixed`` sorts the int8 scores and widens the eight kept.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

B, T, D, V = 4, 16, 128, 32000
N = 1024
F32, BF16 = jnp.float32, jnp.bfloat16


def prefill(h: jax.Array, w: jax.Array) -> jax.Array:
    return (h @ w)[:, -1]


def prefill_fixed(h: jax.Array, w: jax.Array) -> jax.Array:
    return h[:, -1] @ w


def prefill_argmax(h: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.argmax((h @ w)[:, -1], axis=-1)


def prefill_argmax_fixed(h: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.argmax(h[:, -1] @ w, axis=-1)


def project(x: jax.Array, w: jax.Array) -> jax.Array:
    return x @ w.reshape(2, w.shape[0] // 2, N).transpose(1, 0, 2).reshape(w.shape[0], N)


def project_fixed(x: jax.Array, w: jax.Array) -> jax.Array:
    return x @ w


def widen(x: jax.Array, w: jax.Array) -> jax.Array:
    return x @ w.astype(F32)


def widen_fixed(x: jax.Array, w: jax.Array) -> jax.Array:
    return x @ w


S = jax.ShapeDtypeStruct
CASES = {
    # name: (wasteful, its arguments, fixed, its arguments)
    "prefill": (prefill, (S((B, T, D), F32), S((D, V), F32)), prefill_fixed, (S((B, T, D), F32), S((D, V), F32))),
    "prefill_argmax": (prefill_argmax, (S((16, T, D), F32), S((D, V), F32)), prefill_argmax_fixed,
                       (S((16, T, D), F32), S((D, V), F32))),
    "project": (project, (S((16, 512), F32), S((512, N), F32)), project_fixed, (S((16, 512), F32), S((512, N), F32))),
    "widen": (widen, (S((16, N), F32), S((N, N), BF16)), widen_fixed, (S((16, N), F32), S((N, N), F32))),
}


def _args(specs: tuple[S, ...]) -> list[jax.Array]:
    return [jnp.ones(s.shape, s.dtype) for s in specs]


_JITTED = {name: (jax.jit(f), _args(a), jax.jit(g), _args(b)) for name, (f, a, g, b) in CASES.items()}


def step() -> list[jax.Array]:
    """Every wasteful program once."""
    return [f(*a) for f, a, _, _ in _JITTED.values()]


def step_fixed() -> list[jax.Array]:
    """Every fixed program once."""
    return [g(*b) for _, _, g, b in _JITTED.values()]


def top_sorted(x: jax.Array) -> jax.Array:
    return jnp.sort(x.astype(jnp.int32), axis=-1)[:, -8:]


def top_sorted_fixed(x: jax.Array) -> jax.Array:
    return jnp.sort(x, axis=-1)[:, -8:].astype(jnp.int32)


CASES["top_sorted"] = (top_sorted, (S((64, 32000), jnp.int8),), top_sorted_fixed, (S((64, 32000), jnp.int8),))
_JITTED["top_sorted"] = (jax.jit(top_sorted), _args(CASES["top_sorted"][1]), jax.jit(top_sorted_fixed),
                         _args(CASES["top_sorted"][3]))
