"""The programs the promise-vs-measured table judges: each rule's waste and its hand-fixed twin.

Shaped like the rules' own test programs (``tests/rules/programs``, ``tests/fixes/programs``) and
the README's sampler, at a size given by the caller: ``make(name, size) -> Case``. ``step`` is the
program as a user writes it, ``fixed`` the same step with the fix made by hand; ``codes`` the rules
whose findings the fix answers (the findings whose promise is compared).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SIZES: dict[str, tuple[tuple[int, ...], ...]] = {
    # (batch, vocab): the held-out eager astype before a jitted argmax is (32, 65536).
    "eager_widen_argmax": ((8, 32000), (32, 65536), (64, 128000)),
    # (batch, vocab): a greedy sampler that also returns its logits, no donation (README's sampler.py).
    "sampler_returns_logits": ((8, 32000), (32, 65536), (64, 128000)),
    # (batch, vocab): argmax of a temperature softmax (tests/rules/programs/greedy_softmax.py).
    "softmax_argmax": ((8, 32000), (8, 128000), (32, 128000)),
    # (batch, hidden, vocab): an exp fused into the LM head's matmul before the argmax.
    "lm_head_exp": ((8, 256, 16000), (8, 256, 32000), (16, 256, 64000)),
}
_SOURCES = {
    "eager_widen_argmax": """\
import jax
import jax.numpy as jnp

LOGITS = jax.random.normal(jax.random.key(0), ({b}, {v}), jnp.float32).astype(jnp.bfloat16)


@jax.jit
def sample(x):
    return jnp.argmax(x, axis=-1)


def step():
    return sample(LOGITS.astype(jnp.float32))
""",
    "sampler_returns_logits": """\
import jax
import jax.numpy as jnp

_state = (jnp.zeros(({b},), jnp.int32), jax.random.normal(jax.random.key(0), ({b}, {v}), jnp.float32))


def _sample(state):
    _, logits = state
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), logits


sample = jax.jit(_sample)


def step():
    global _state
    _state = sample(_state)
    return _state[0]
""",
    "softmax_argmax": """\
import jax
import jax.numpy as jnp

LOGITS = jax.random.normal(jax.random.key(0), ({b}, {v}), jnp.float32)
T = jnp.float32(0.7)


@jax.jit
def sample(x, t):
    return jnp.argmax(jax.nn.softmax(x / t, axis=-1), axis=-1)


def step():
    return sample(LOGITS, T)
""",
    "lm_head_exp": """\
import jax
import jax.numpy as jnp

HIDDEN = jax.random.normal(jax.random.key(0), ({b}, {h}), jnp.float32)
W = jax.random.normal(jax.random.key(1), ({h}, {v}), jnp.float32) * 0.05


@jax.jit
def head(x, w):
    return jnp.argmax(jnp.exp(x @ w), axis=-1)


def step():
    return head(HIDDEN, W)
""",
}


def source(name: str, size: tuple[int, ...]) -> str:
    """The program as a file a user would profile (``FILE.py:step``): the same step as :func:`make`'s,
    its arrays module-level, for the program A/B's path (a fix applied to a copy of the file)."""
    if name == "lm_head_exp":
        b, h, v = size
        return _SOURCES[name].format(b=b, h=h, v=v)
    b, v = size
    return _SOURCES[name].format(b=b, v=v)


CODES = {"eager_widen_argmax": ("HD003", "HD004"), "sampler_returns_logits": ("HD002",),
         "softmax_argmax": ("HD011",), "lm_head_exp": ("HD011",)}


@dataclass(frozen=True)
class Case:
    """One program at one size: the step as written, the step fixed by hand, the rules it answers."""

    name: str
    size: tuple[int, ...]
    step: Callable[[], Any]
    fixed: Callable[[], Any]
    codes: tuple[str, ...]


def make(name: str, size: tuple[int, ...]) -> Case:
    """The case ``name`` at ``size`` (its arrays made once, passed as arguments, never closed over)."""
    import jax
    import jax.numpy as jnp

    key = jax.random.key(0)
    if name == "eager_widen_argmax":
        b, v = size
        logits = jax.random.normal(key, (b, v), jnp.float32).astype(jnp.bfloat16)
        sample = jax.jit(lambda x: jnp.argmax(x, axis=-1))
        return Case(name, size, lambda: sample(logits.astype(jnp.float32)),
                    lambda: sample(logits), CODES[name])
    if name == "sampler_returns_logits":
        b, v = size
        state = {"logits": jax.random.normal(key, (b, v), jnp.float32)}
        plain = jax.jit(lambda x: (jnp.argmax(x, axis=-1), x))
        donated = jax.jit(lambda x: (jnp.argmax(x, axis=-1), x), donate_argnums=0)

        def run(f: Callable[[Any], Any]) -> Callable[[], Any]:
            def step() -> Any:
                tok, state["logits"] = f(state["logits"])  # a loop carries what the sampler returns
                return tok
            return step

        return Case(name, size, run(plain), run(donated), CODES[name])
    if name == "softmax_argmax":
        b, v = size
        logits = jax.random.normal(key, (b, v), jnp.float32)
        t = jnp.float32(0.7)
        soft = jax.jit(lambda x, t: jnp.argmax(jax.nn.softmax(x / t, axis=-1), axis=-1))
        hard = jax.jit(lambda x, t: jnp.argmax(x, axis=-1))
        return Case(name, size, lambda: soft(logits, t), lambda: hard(logits, t), CODES[name])
    if name == "lm_head_exp":
        b, h, v = size
        hidden = jax.random.normal(key, (b, h), jnp.float32)
        w = jax.random.normal(jax.random.key(1), (h, v), jnp.float32) * 0.05
        mapped = jax.jit(lambda x, w: jnp.argmax(jnp.exp(x @ w), axis=-1))
        plain = jax.jit(lambda x, w: jnp.argmax(x @ w, axis=-1))
        return Case(name, size, lambda: mapped(hidden, w), lambda: plain(hidden, w), CODES[name])
    raise KeyError(name)
