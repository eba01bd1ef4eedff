"""Counting the backend compiles inside a measured window: the one compile counter of verify.

Every kind of target counts with it. The counting itself is the reference engine's compile log
(:mod:`hlo_doctor.engine.recompilation`: one ``jax.monitoring`` listener for the process, and JAX's
cache-miss explanation of each compile when asked for). It stays in the engine because the engine
imports nothing of hlo-doctor (a patched copy of it runs on its own); verify reads it only here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The ``jax.monitoring`` event of one backend compile (one new executable)."""


@dataclass(slots=True)
class CompileWindow:
    """The backend compiles inside one window; filled when the window closes."""

    programs: tuple[str, ...] = ()
    """The name JAX reports for each backend compile (``jit(sample)``), in order."""
    reasons: tuple[str, ...] = ()
    """With ``explain``: one line per compile, the program and JAX's cache-miss reason."""


@contextmanager
def compile_window(*, explain: bool = False) -> Iterator[CompileWindow]:
    """Count the backend compiles inside the block; with ``explain``, keep JAX's reason for each.

    ``explain`` switches ``jax_explain_cache_misses`` on inside the block, which costs time at every
    trace: the engine A/B leaves it off (its engine reports its own reasons); the program level of a
    tpu-inference tree, whose ``sample()`` reports nothing, turns it on.
    """
    # Imported here: the engine package imports JAX, and a light command imports verify's settings.
    from hlo_doctor.engine.recompilation import CompileWatch

    window = CompileWindow()
    with CompileWatch(explain=explain) as watch:
        yield window
    window.programs = tuple(event.fun_name for event in watch.compiles())
    window.reasons = watch.reasons() if explain else ()
