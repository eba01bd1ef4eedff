"""What a step returned, on the host, and the first element where two sides' outputs differ.

Bit for bit by default: two floats are equal only when their bytes are (``-0.0`` differs from ``0.0``,
a NaN equals only the same NaN). With a tolerance, floating-point leaves are equal where
``|a - b| <= atol + rtol * |b|`` (NaN where both are NaN); integer and boolean leaves stay exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Leaf:
    """One array of a step's output pytree, copied to the host, with its path in the pytree."""

    path: str
    """``[1]``, ``['cache'][0]``, or empty for a bare array."""
    value: np.ndarray


@dataclass(frozen=True, slots=True)
class Difference:
    """The first element that differs between the sides, and where."""

    where: str
    """``output [0], index (3, 7)`` (or what differs in the structure)."""
    baseline: str
    treatment: str

    def describe(self) -> str:
        """``output [0], index (3, 7): 5 vs 9``."""
        return f"{self.where}: {self.baseline} vs {self.treatment}"


def host_leaves(result: object) -> tuple[Leaf, ...]:
    """The leaves of a step's result as host arrays (JAX key arrays as their key data)."""
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path(result)
    out = []
    for path, leaf in flat:
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out.append(Leaf(jax.tree_util.keystr(path), np.asarray(leaf)))
    return tuple(out)


def _value(a: np.ndarray, index: tuple[int, ...]) -> str:
    x = a[index] if a.ndim else a[()]
    if a.dtype.kind in "fc" or a.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return repr(float(x)) if a.dtype.kind != "c" else repr(complex(x))
    return repr(x.item() if hasattr(x, "item") else x)


def _unequal(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """A boolean mask of the elements that differ."""
    floating = a.dtype.kind in "fc" or a.dtype.name.startswith(("bfloat16", "float8"))
    if floating and (rtol or atol):
        wa, wb = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), b.astype(
            np.complex128 if b.dtype.kind == "c" else np.float64)
        return ~np.isclose(wa, wb, rtol=rtol, atol=atol, equal_nan=True)
    # Bit for bit: compare the bytes of each element (NaN payloads and signed zeros included).
    size = a.dtype.itemsize
    va = np.ascontiguousarray(a).view(np.uint8).reshape(a.shape + (size,))
    vb = np.ascontiguousarray(b).view(np.uint8).reshape(b.shape + (size,))
    return np.any(va != vb, axis=-1)


def first_difference(baseline: Sequence[Leaf], treatment: Sequence[Leaf], *, rtol: float = 0.0,
                     atol: float = 0.0) -> Difference | None:
    """The first differing element of two outputs (leaves in order, elements in row-major order)."""
    if [x.path for x in baseline] != [x.path for x in treatment]:
        return Difference("the output's structure", f"{len(baseline)} leaves {[x.path for x in baseline][:4]}",
                          f"{len(treatment)} leaves {[x.path for x in treatment][:4]}")
    for a, b in zip(baseline, treatment, strict=True):
        name = f"output {a.path}" if a.path else "output"
        if a.value.dtype != b.value.dtype or a.value.shape != b.value.shape:
            return Difference(name, f"{a.value.dtype}{list(a.value.shape)}", f"{b.value.dtype}{list(b.value.shape)}")
        if not (rtol or atol) and a.value.tobytes() == b.value.tobytes():
            continue
        mask = _unequal(a.value, b.value, rtol, atol)
        if not mask.any():
            continue
        index = tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()
        count = int(mask.sum())
        return Difference(f"{name}, index {index} ({count} of {a.value.size} elements differ)",
                          _value(a.value, index), _value(b.value, index))
    return None
