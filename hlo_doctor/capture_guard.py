"""Running someone else's step function without letting it take the command over.

``profile`` imports and calls the user's code in its own process. That code may print (which would
corrupt ``--format json`` on stdout), call ``sys.exit`` (which would end hlo-doctor with exit 0 and no
output), never return, or be stopped by SIGTERM from CI. The context managers here keep each of those
an input error (exit 2) or a clean interruption, with the staged run folder removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from hlo_doctor.core.errors import InputError

T = TypeVar("T")

HARD_STOP_GRACE_S = 10.0
"""A step stuck in native code never returns to Python, so the timeout's exception cannot reach it;
this long after the deadline the process removes its staged folder and exits 2 from a watchdog."""


class StepTimeout(InputError):
    """The target's step (or warm-up) ran past ``--timeout``."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that it cleans up as after Ctrl-C."""


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what the target prints (Python ``print`` and native writes to fd 1) to stderr for the block.

    stdout is the command's machine output (``--format json``); people read stderr.
    """
    sys.stdout.flush()
    saved: int | None = None
    with contextlib.suppress(OSError, ValueError):
        saved = os.dup(1)
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` (a KeyboardInterrupt) for the block, in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def call_target(func: Callable[[], T], *, what: str, timeout_s: float | None = None,
                staged: Path | None = None) -> T:
    """``func()``, with the target's ways out turned into input errors.

    ``what`` names the call in messages (``TARGET x.py:step, warm-up step 2``). ``sys.exit`` ->
    :class:`InputError`; past ``timeout_s`` -> :class:`StepTimeout` (by SIGALRM, and if the step is
    stuck in native code, by a watchdog that removes ``staged`` and exits 2 ``HARD_STOP_GRACE_S``
    later). Other exceptions pass through for the caller to word.
    """
    with _deadline(timeout_s, what, staged):
        try:
            return func()
        except SystemExit as exc:
            raise InputError(f"{what} called sys.exit({exc.code!r})",
                             "a step function must return its results, not exit the process") from None


@contextlib.contextmanager
def _deadline(timeout_s: float | None, what: str, staged: Path | None) -> Iterator[None]:
    if not timeout_s or threading.current_thread() is not threading.main_thread():
        yield
        return
    message = f"{what} did not return within --timeout {timeout_s:g} s"
    hint = "make the step finish, or raise --timeout"

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise StepTimeout(message, hint)

    def hard_stop() -> None:
        sys.stderr.write(f"error: {message} (stuck outside Python; stopped) - {hint}\n")
        sys.stderr.flush()
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        os._exit(2)

    watchdog = threading.Timer(timeout_s + HARD_STOP_GRACE_S, hard_stop)
    watchdog.daemon = True
    old: Any = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    watchdog.start()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        watchdog.cancel()
