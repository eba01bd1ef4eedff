"""Counting compiles with ``jax.monitoring`` and forbidding them after warm-up.

One listener per loaded engine tree records every trace, lowering and backend-compile event with
the function name JAX reports. While a :class:`CompileWatch` is open, ``jax_explain_cache_misses``
is on and its log records are captured, so a compile can be reported with JAX's own reason
(e.g. ``at logits, now bf16[64,256000] and before f32[64,256000]``).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from dataclasses import dataclass

import jax

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_WATCHED_EVENTS = (_TRACE_EVENT, _LOWER_EVENT, BACKEND_COMPILE_EVENT)


@dataclass(frozen=True, slots=True)
class CompileEvent:
    """One trace, lowering or backend compile seen by ``jax.monitoring``."""

    event: str
    fun_name: str
    duration_s: float
    at: float


class _CompileLog:
    """Every compile event of this process (registered once, never removed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[CompileEvent] = []
        self._registered = False

    def ensure_registered(self) -> None:
        with self._lock:
            if not self._registered:
                jax.monitoring.register_event_duration_secs_listener(self._on_duration)
                self._registered = True

    def _on_duration(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event in _WATCHED_EVENTS:
            with self._lock:
                self._events.append(CompileEvent(event, str(kwargs.get("fun_name", "?")), duration_secs, time.time()))

    def mark(self) -> int:
        with self._lock:
            return len(self._events)

    def since(self, mark: int) -> list[CompileEvent]:
        with self._lock:
            return list(self._events[mark:])


COMPILE_LOG = _CompileLog()

_MISS_HEADER = re.compile(r"for (\S+) defined at")


def _bare_name(fun_name: str) -> str:
    """``jit(sample)`` -> ``sample``."""
    match = re.fullmatch(r"\w+\((.*)\)", fun_name)
    return match.group(1) if match else fun_name


def _type_diff_from_jax_frame() -> str | None:
    """The argument types that differ from the closest same-structure cache key, or None.

    JAX's own explanation reports only its "closest" previous key, and it ranks a pytree-metadata
    difference (another ``do_sampling``/``logprobs`` entry of the menu) before a dtype difference; the
    entry that differs only in dtype is the one that says what went wrong. The log record is emitted
    synchronously from JAX's ``explain`` function, whose locals hold the new and the previous keys.
    This reads them when it can (an internal of jax 0.10) and otherwise gives up quietly.
    """
    frame = sys._getframe()
    for _ in range(30):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return None
        if frame.f_code.co_name == "explain" and {"in_avals", "keys", "debug_info"} <= frame.f_locals.keys():
            break
    else:
        return None
    try:
        local = frame.f_locals
        new = local["in_avals"]
        names = local["debug_info"].arg_names or ()
        best: tuple[int, int, list[str]] | None = None
        for key in local["keys"]:
            old = key[1][0]
            if old.tree != new.tree or len(old.vals) != len(new.vals):
                continue
            pairs = [(name, a, b) for name, a, b in zip(names, new.vals, old.vals, strict=False) if a != b]
            # Closest: fewest differing arguments, then fewest differing shapes (a dtype-only
            # difference at the same bucket says more than one at another bucket).
            score = (len(pairs), sum(getattr(a, "shape", None) != getattr(b, "shape", None) for _, a, b in pairs))
            diffs = [f"at {name}, now {a.str_short(True)} and before {b.str_short(True)}" for name, a, b in pairs]
            if diffs and (best is None or score < best[:2]):
                best = (*score, diffs)
        return "; ".join(best[2]) if best else None
    except Exception:  # noqa: BLE001 - internals moved: fall back to JAX's message
        return None


class _MissExplanations(logging.Handler):
    """Keeps the detail lines of JAX's "TRACING CACHE MISS" explanations, by function name."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.reasons: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record must not break the engine
            return
        if "CACHE MISS" not in message:
            return
        header = _MISS_HEADER.search(message)
        if header is None:
            # "never seen function": the first trace of a function nested in a traced one, no news.
            return
        detail = _type_diff_from_jax_frame()
        if detail is None:
            lines = [line.strip(" *") for line in message.splitlines()[3:] if line.strip()]
            detail = "; ".join(lines) if lines else "cache miss"
        self.reasons.append((header.group(1), detail))


class CompileWatch:
    """Counts backend compiles between ``__enter__`` and ``__exit__`` and keeps their reasons."""

    def __init__(self, explain: bool = True) -> None:
        COMPILE_LOG.ensure_registered()
        self._explain = explain
        self._mark = 0
        self._handler = _MissExplanations()
        self._previous_explain: bool | None = None
        self._previous_propagate = True
        self._events: list[CompileEvent] | None = None

    def __enter__(self) -> CompileWatch:
        self._mark = COMPILE_LOG.mark()
        if self._explain:
            self._previous_explain = bool(jax.config.jax_explain_cache_misses)  # type: ignore[attr-defined]
            jax.config.update("jax_explain_cache_misses", True)
            logger = logging.getLogger("jax")
            logger.addHandler(self._handler)
            # The explanations are data for the report, not console output.
            self._previous_propagate = logger.propagate
            logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        self._events = COMPILE_LOG.since(self._mark)
        if self._explain:
            logger = logging.getLogger("jax")
            logger.removeHandler(self._handler)
            logger.propagate = self._previous_propagate
            jax.config.update("jax_explain_cache_misses", bool(self._previous_explain))

    def events(self) -> list[CompileEvent]:
        """Compile events so far (inside the window) or of the whole window (after it)."""
        return self._events if self._events is not None else COMPILE_LOG.since(self._mark)

    def compiles(self) -> list[CompileEvent]:
        """Backend compiles only: each is one new executable."""
        return [e for e in self.events() if e.event == BACKEND_COMPILE_EVENT]

    def reasons(self) -> tuple[str, ...]:
        """One line per backend compile: the program and, where JAX explained the miss, why."""
        explained: dict[str, list[str]] = {}
        for name, detail in self._handler.reasons:
            explained.setdefault(name, []).append(detail)
        lines = []
        for event in self.compiles():
            details = explained.get(_bare_name(event.fun_name))
            why = details.pop(0) if details else "no cache-miss explanation from JAX"
            lines.append(f"{event.fun_name}: {why}")
        return tuple(lines)


class RecompilationError(RuntimeError):
    """A program was traced, lowered or compiled where the precompiled menu should have served it."""


class ForbidCompile:
    """Raises :class:`RecompilationError` when anything inside the block traced, lowered or compiled.

    The check runs when the block ends (the call has finished by then); an exception already on its
    way out is left alone.
    """

    def __init__(self, message: str = "a JAX compilation happened where the precompiled menu should have served") -> None:
        COMPILE_LOG.ensure_registered()
        self.message = message
        self._mark = 0

    def __enter__(self) -> ForbidCompile:
        self._mark = COMPILE_LOG.mark()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            events = COMPILE_LOG.since(self._mark)
            if events:
                names = sorted({e.fun_name for e in events})
                raise RecompilationError(f"{self.message}: {', '.join(names)}")
