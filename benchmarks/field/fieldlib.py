"""Helpers shared by the field loops' what-if variants."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax

_ORIGINAL_WHILE = jax.lax.while_loop
_LOOPS: dict[Any, Callable[[Any], Any]] = {}


def _while_once(cond: Callable[[Any], Any], body: Callable[[Any], Any], state: Any) -> Any:
    """``lax.while_loop`` whose first call for each state structure is jitted and reused: the
    what-if of a loop compiled once, where the library builds fresh closures on every call."""
    leaves = jax.tree.leaves(state)
    key = (jax.tree.structure(state),
           tuple((getattr(x, "shape", ()), str(getattr(x, "dtype", type(x)))) for x in leaves))
    if key not in _LOOPS:
        _LOOPS[key] = jax.jit(lambda s: _ORIGINAL_WHILE(cond, body, s))
    return _LOOPS[key](state)


@contextlib.contextmanager
def loop_compiled_once() -> Iterator[None]:
    """Within the block, every eager ``jax.lax.while_loop`` reuses its first compiled program.

    The reused program keeps the closures of its first call; the loops here capture the same
    values on every call (parameters, pad and end ids), and the what-if checks the tokens."""
    jax.lax.while_loop = _while_once
    try:
        yield
    finally:
        jax.lax.while_loop = _ORIGINAL_WHILE
