"""Counting backend compiles inside measured windows with ``jax.monitoring``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileCounter:
    """Counts backend compiles by ``jax.monitoring`` while armed (one listener for the whole verify)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: list[str] = []
        self._armed = False

    def _on_duration(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == BACKEND_COMPILE_EVENT and self._armed:
            with self._lock:
                self._names.append(str(kwargs.get("fun_name", "?")))

    @contextmanager
    def listening(self) -> Iterator[CompileCounter]:
        import jax

        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        try:
            yield self
        finally:
            try:
                from jax._src import monitoring as _monitoring

                _monitoring.unregister_event_duration_listener(self._on_duration)
            except (ImportError, AttributeError, ValueError):  # older/newer JAX: a stale listener is harmless
                pass

    @contextmanager
    def window(self) -> Iterator[list[str]]:
        """Yield a list that holds, after the block, the names of the programs compiled inside it."""
        seen: list[str] = []
        with self._lock:
            mark = len(self._names)
            self._armed = True
        try:
            yield seen
        finally:
            with self._lock:
                self._armed = False
                seen.extend(self._names[mark:])
