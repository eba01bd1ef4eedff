"""``donate-state``'s examples: code it must leave alone (VALID) and code with its fixed text (INVALID).

Each is a test (tests/fixes/test_catalog_examples.py) run through the real codemod; the INVALID
ones are also compiled and run by tests/fixes/test_catalog_programs.py where they are whole programs.
"""

from __future__ import annotations

from hlo_doctor.fixes.source.base import Hint, SourceExample

# gemma's sampler loop (gemma/gm/text/_sampler_loop.py), cut down: a jitted method whose while_loop
# carries the state; the caller rebinds the state from the result.
_GEMMA_STYLE = '''\
import functools

import jax


class SamplerLoop:
    @functools.partial(jax.jit, static_argnames=('self',))
    def _sample_loop(self, *, params, state):
        state = jax.lax.while_loop(self.cond, self.body, state)
        return state

    def sample(self, params, state):
        state = self._sample_loop(params=params, state=state)
        return state.tokens


def run(loop, params, state):
    return loop.sample(params, state)
'''

_DECORATED = '''\
import jax


@jax.jit
def step(params, state):
    return jax.lax.fori_loop(0, 8, lambda i, s: s + params, state)


def generate(params, n):
    state = jax.numpy.zeros(4)
    for _ in range(n):
        state = step(params, state)
    return state
'''

_CALLED = '''\
import jax


def _loop(state):
    return jax.lax.while_loop(lambda s: s.pos < 8, _body, state)


generate = jax.jit(_loop)


def run(n):
    state = init()
    for _ in range(n):
        state = generate(state)
    return state
'''

_ARGNUMS = '''\
import jax
from functools import partial


@partial(jax.jit, donate_argnums=(0,))
def step(cache, state):
    return cache, state + 1


def run(cache):
    state = jax.numpy.zeros(4)
    cache, state = step(cache, state)
    return cache, state
'''

# A decode loop keeping its state at module level and rebinding it from the result: every later read of
# ``_state`` reads the new value, so nothing reads a donated array.
_MODULE_STATE = '''\
import jax

_state = (jax.numpy.zeros(4), jax.numpy.zeros((), jax.numpy.int32))


def _decode(state):
    cache, tok = state
    return cache + 1, tok + 1


decode = jax.jit(_decode)


def step():
    global _state
    _state = decode(_state)
    return _state[1]


def last_token():
    return int(_state[1])
'''

# The loop's caller: each call's token kept (``KEEP``) while the next call runs.
_RUN_TOKENS = """

def run(n):
    return [KEEP for _ in range(n)]
"""

VALID = (
    SourceExample(code=_MODULE_STATE + _RUN_TOKENS.replace("KEEP", "step()"), line=7, hint=Hint(argument="state"),
                  reason="line 25 keeps it while step() runs again",
                  note="module-level state rebound from the result, but the caller keeps each returned token, a part "
                       "of the state the next call donates"),
    SourceExample(code=_MODULE_STATE + "\n\n_first = _state\n\n\ndef first():\n    return _first[1]\n", line=7,
                  hint=Hint(argument="state"), reason="_first (line 24) holds _state's value from before any call",
                  note="module-level state rebound from the result, but a module-level alias of its first value is read"),
    SourceExample(code=_MODULE_STATE + "\n\ndef report():\n    prev = _state\n    step()\n    return prev[1]\n",
                  line=7, hint=Hint(argument="state"), reason="prev (line 25) holds _state across step()",
                  note="module-level state rebound from the result, but another function holds the old value "
                       "across the step and reads it"),
    SourceExample(code=_MODULE_STATE.replace("_state = (jax.numpy.zeros(4), jax.numpy.zeros((), jax.numpy.int32))",
                                             "INIT = (jax.numpy.zeros(4), jax.numpy.zeros((), jax.numpy.int32))\n"
                                             "_state = INIT")
                  + "\n\ndef reset():\n    global _state\n    _state = INIT\n", line=8, hint=Hint(argument="state"),
                  reason="INIT (line 4) holds the arrays _state is bound from",
                  note="module-level state starting from a constant that a reset reads again"),
    SourceExample(code=_CALLED.replace("        state = generate(state)\n",
                                       "        out = generate(state)\n        print(state.pos)\n"),
                  line=5, hint=Hint(argument="state"), reason="read after the call",
                  note="the state is read after the call"),
    SourceExample(code=_CALLED.replace("        state = generate(state)\n",
                                       "        prev = state\n        state = generate(state)\n        print(prev)\n"),
                  line=5, hint=Hint(argument="state"), reason="prev (line 14) holds state",
                  note="an alias of the state is read after the call"),
    SourceExample(code='''\
import jax

generate = jax.jit(lambda s: s + 1)
_state = jax.numpy.zeros(4)


def _loop(state):
    return state + 1


step_fn = jax.jit(_loop)


def step():
    return step_fn(_state)
''', line=8, hint=Hint(argument="state"), reason="module-level name",
                  note="a global read on every call (the profiled step's own shape)"),
    SourceExample(code=_CALLED.replace("generate = jax.jit(_loop)", "generate = _loop"), line=5,
                  hint=Hint(argument="state"), kind="no-pattern", reason="not in a function wrapped by jax.jit",
                  note="the function is not jitted"),
    SourceExample(code=_CALLED.replace("jax.jit(_loop)", "jax.jit(_loop, static_argnames='state')"), line=5,
                  hint=Hint(argument="state"), reason="static",
                  note="a static argument has no buffer"),
    SourceExample(code=_CALLED.replace("state = generate(state)", "state = generate(state, state)").replace(
                  "def _loop(state):", "def _loop(state, other):"), line=5, hint=Hint(argument="state"),
                  reason="more than once", note="the state passed twice (aliased)"),
    SourceExample(code=_CALLED.replace("jax.jit(_loop)", 'jax.jit(_loop, donate_argnames="state")'), line=5,
                  hint=Hint(argument="state"), kind="already-applied", reason="already donated",
                  note="already donated"),
    SourceExample(code=_CALLED.replace("        state = generate(state)\n    return state",
                                       "        out = generate(state)\n    return out"),
                  line=5, hint=Hint(argument="state"), reason="next iteration",
                  note="called in a loop without rebinding the state"),
    SourceExample(code=_CALLED, line=5, hint=Hint(argument="cache"), reason="not an argument of _loop()",
                  note="the finding's parameter is not an argument of the jitted function"),
)

# keras-hub 0.32's CausalLM.make_generate_function (causal_lm.py), cut down: the jit is nested, the
# inputs are converted (which may hand back the caller's arrays) and the wrapper is stored, not called.
_KERAS_HUB = '''\
import jax
from functools import partial


class CausalLM:
    def make_generate_function(self):
        @partial(jax.jit, static_argnames=["stop_token_ids"])
        def compiled_generate_function(inputs, stop_token_ids, state):
            return self.generate_step(inputs, stop_token_ids), state

        def wrapped_generate_function(inputs, stop_token_ids=None):
            inputs = tree.map_structure(ops.convert_to_tensor, inputs)
            outputs, state = compiled_generate_function(inputs, stop_token_ids, self.state)
            return outputs

        self.generate_function = wrapped_generate_function
        return self.generate_function
'''

INVALID = (
    SourceExample(code=_MODULE_STATE, line=7, hint=Hint(argument="state"), safe=False,
                  fixed=_MODULE_STATE.replace("jax.jit(_decode)", 'jax.jit(_decode, donate_argnames="state")'),
                  note="module-level state rebound from the result; step() returns a part of it and its callers are "
                       "outside the file: unsafe"),
    SourceExample(code=_MODULE_STATE + _RUN_TOKENS.replace("KEEP", "int(step())"), line=7, hint=Hint(argument="state"),
                  fixed=(_MODULE_STATE + _RUN_TOKENS.replace("KEEP", "int(step())")).replace(
                      "jax.jit(_decode)", 'jax.jit(_decode, donate_argnames="state")'),
                  note="module-level state rebound from the result (`_state = decode(_state)`), read after it only "
                       "through the name, and each returned token read into an int at once: safe"),
    SourceExample(code=_KERAS_HUB, line=9, hint=Hint(argument="inputs"), safe=False, fixed=_KERAS_HUB.replace(
        'static_argnames=["stop_token_ids"])', 'static_argnames=["stop_token_ids"], donate_argnames="inputs")'),
        note="keras-hub's generate: inputs = convert(inputs) may be the caller's arrays, and the wrapper is "
             "stored rather than called in the file: unsafe"),
    SourceExample(code=_GEMMA_STYLE, line=9, hint=Hint(argument="state"), fixed=_GEMMA_STYLE.replace(
        "static_argnames=('self',))", "static_argnames=('self',), donate_argnames='state')"), safe=False,
        note="gemma's shape: partial(jax.jit) on a method, the state from sample()'s parameter; run() passes a "
             "parameter of its own whose callers are outside the file: unsafe"),
    SourceExample(code=_DECORATED, fixed=_DECORATED.replace("import jax\n", "import functools\nimport jax\n").replace(
        "@jax.jit\n", '@functools.partial(jax.jit, donate_argnames="state")\n'),
        note="a bare @jax.jit, whole file: the state rebound in a loop; functools imported"),
    SourceExample(code=_CALLED, line=5, hint=Hint(argument="state_cache_0_.1"),
                  fixed=_CALLED.replace("jax.jit(_loop)", 'jax.jit(_loop, donate_argnames="state")'),
                  note="jax.jit(f) called at module level; the argument named by the HLO parameter"),
    SourceExample(code=_ARGNUMS, line=7, hint=Hint(argument="state"),
                  fixed=_ARGNUMS.replace("donate_argnums=(0,)", "donate_argnums=(0, 1)"),
                  note="donate_argnums already there: the position is added to it"),
)
