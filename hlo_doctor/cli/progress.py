"""Progress of a long command on stderr, driven by ``progress(stage, done, total)`` calls.

On a terminal: one rich bar per stage. In a pipe or a CI log (no terminal to redraw): one plain line
each time a stage starts or finishes, with the time since the command began, and while a stage runs
a line at least every 15 s (``HLO_DOCTOR_PROGRESS_INTERVAL`` seconds) saying what is left, so a log
shows where the minutes go instead of staying silent until the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hlo_doctor.cli.common import console, people_see_a_terminal
from hlo_doctor.core.model import ProgressFn
from hlo_doctor.core.pyproject import env_seconds

if TYPE_CHECKING:
    from rich.progress import TaskID

__all__ = ["DEFAULT_INTERVAL_S", "INTERVAL_ENV", "plain_progress", "progress_bars", "progress_interval"]


@contextmanager
def progress_bars(labels: Mapping[str, str] | None = None, *, keep: bool = False,
                  label_width: int | None = None) -> Iterator[ProgressFn]:
    """One rich bar per stage on a terminal, else :func:`plain_progress`; ``labels`` names the stages
    (else the stage itself is shown).

    ``keep`` leaves the finished bars on screen (a report that follows refers to them);
    ``label_width`` pads the labels so that the bars line up.
    """
    names = labels or {}
    if not people_see_a_terminal():
        with plain_progress(names) as update:
            yield update
        return
    # rich's progress display only on a terminal (and only then imported).
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    description = "{task.description}" if label_width is None else f"{{task.description:<{label_width}}}"
    with Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=not keep) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                # A stage may name what a capture names (a measurement's programs): shown as written,
                # never read as rich markup (a "[/]" in a module name would stop the command).
                tasks[stage] = bar.add_task(escape(names.get(stage, stage)), total=max(total, 1))
            # A stage without a total is done as soon as it reports.
            bar.update(tasks[stage], completed=done if total else 1, total=max(total, 1))

        yield update


INTERVAL_ENV = "HLO_DOCTOR_PROGRESS_INTERVAL"
"""Seconds between two progress lines off a terminal while a stage runs (default 15)."""
DEFAULT_INTERVAL_S = 15.0


def progress_interval() -> float:
    """The interval :data:`INTERVAL_ENV` sets, else :data:`DEFAULT_INTERVAL_S`.

    Raises:
        InputError: a value that is not a number of seconds above 0.
    """
    return env_seconds(INTERVAL_ENV, DEFAULT_INTERVAL_S, f"a line every {DEFAULT_INTERVAL_S:g} s")


def _remaining(seconds: float) -> str:
    """``~40 s left``, ``~3 min left``."""
    if seconds < 90:
        return f"~{max(seconds, 1):.0f} s left"
    return f"~{seconds / 60:.0f} min left"


@dataclass(slots=True)
class _Stage:
    """What the plain lines know of one stage: when it began, its last count, its last line."""

    began: float
    done: int = 0
    total: int = 0
    printed: float = 0.0
    finished: bool = False
    counted: float = 0.0
    """When ``done`` last changed."""

    def remains(self, now: float) -> str:
        """What is left: the pace of the units done so far over the units left, less the time the
        current one has already run; or how long the stage has run without a count."""
        if self.total and self.done:
            pace = (self.counted - self.began) / self.done
            return ", " + _remaining(pace * (self.total - self.done) - (now - self.counted))
        return f", {now - self.began:.0f} s in"


@contextmanager
def plain_progress(labels: Mapping[str, str] | None = None,
                   clock: Callable[[], float] = time.monotonic, *,
                   interval_s: float | None = None, timer: bool = True) -> Iterator[ProgressFn]:
    """``[  12.3s] warm-up (untraced) 0/3`` when a stage starts and when it is done, and while it
    runs a line at least every ``interval_s`` (:func:`progress_interval`) with what is left:
    ``[  95.0s] rounds 3/12, ~2 min left``. A stage that reports nothing for that long (one long
    round, a warm-up compiling) still gets its line, from a timer thread (``timer``)."""
    names = labels or {}
    every = progress_interval() if interval_s is None else interval_s
    start = clock()
    stages: dict[str, _Stage] = {}
    order: list[str] = []
    lock = threading.Lock()

    def line(stage: str, state: _Stage, now: float, tail: str) -> None:
        count = f" {state.done}/{state.total}" if state.total else ""
        state.printed = now
        console.print(f"[{now - start:7.1f}s] {names.get(stage, stage)}{count}{tail}",
                      markup=False, highlight=False, soft_wrap=True)

    def update(stage: str, done: int, total: int) -> None:
        now = clock()
        with lock:
            complete = done >= total if total else True
            state = stages.get(stage)
            new = state is None or (state.finished and not complete)
            if state is None or new:
                state = stages[stage] = _Stage(began=now)
                order.append(stage)
            was_finished = state.finished
            if done != state.done:
                state.counted = now
            state.done, state.total, state.finished = done, total, complete
            if new or (complete and not was_finished):
                line(stage, state, now, " done" if complete and total else "")
            elif not complete and now - state.printed >= every:
                line(stage, state, now, state.remains(now))

    def beat() -> None:
        """The timer thread: a line for the running stage when none came for ``every`` seconds."""
        while not stop.wait(min(every, 1.0)):
            now = clock()
            with lock:
                running = [s for s in reversed(order) if not stages[s].finished]
                last = max((st.printed for st in stages.values()), default=start)
                if now - last < every:
                    continue
                if running:
                    state = stages[running[0]]
                    line(running[0], state, now, state.remains(now))
                elif order:
                    state = stages[order[-1]]
                    state.printed = now
                    console.print(f"[{now - start:7.1f}s] still working (after {names.get(order[-1], order[-1])})",
                                  markup=False, highlight=False, soft_wrap=True)

    stop = threading.Event()
    thread = threading.Thread(target=beat, name="hlo-doctor-progress", daemon=True)
    if timer:
        thread.start()
    try:
        yield update
    finally:
        stop.set()
        if timer:
            thread.join()
