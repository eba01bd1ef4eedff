"""What a diagnosis is timing on this machine, told to the command's progress display.

A measurement (a replay of the capture's programs, a program or engine A/B, a what-if run) takes its
budget, 10 s by default, and a fix may take several: a command that measures would otherwise sit
silent on a terminal and in a CI log until the report. A command that shows progress hands its
``progress(stage, done, total)`` to :func:`reported_to`; each measurement runs inside
:func:`measuring`, one stage named for what it times (``0/1`` when it starts, ``1/1`` when it ends; a
plain log adds its "N s in" line at each interval, :mod:`hlo_doctor.cli.progress`). Library callers
and measurements read back from the store report nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from hlo_doctor.core.model import ProgressFn

__all__ = ["measuring", "reported_to"]

_REPORT: ContextVar[ProgressFn | None] = ContextVar("_REPORT", default=None)


@contextmanager
def reported_to(progress: ProgressFn | None) -> Iterator[None]:
    """Inside the block, each :func:`measuring` is a stage of ``progress`` (None: of nothing)."""
    token = _REPORT.set(progress)
    try:
        yield
    finally:
        _REPORT.reset(token)


@contextmanager
def measuring(what: str) -> Iterator[None]:
    """One measurement, reported as the stage ``what`` where a command asked for it."""
    report = _REPORT.get()
    if report is None:
        yield
        return
    report(what, 0, 1)
    try:
        yield
    finally:
        report(what, 1, 1)
