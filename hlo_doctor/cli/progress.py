"""Progress of a long command on stderr, driven by ``progress(stage, done, total)`` calls.

On a terminal: one rich bar per stage. In a pipe or a CI log (no terminal to redraw): one plain line
each time a stage starts or finishes, with the time since the command began, so a log shows where
the minutes go instead of staying silent until the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from hlo_doctor.cli.common import console, people_see_a_terminal
from hlo_doctor.core.model import ProgressFn

if TYPE_CHECKING:
    from rich.progress import TaskID

__all__ = ["plain_progress", "progress_bars"]


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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    description = "{task.description}" if label_width is None else f"{{task.description:<{label_width}}}"
    with Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=not keep) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(names.get(stage, stage), total=max(total, 1))
            # A stage without a total is done as soon as it reports.
            bar.update(tasks[stage], completed=done if total else 1, total=max(total, 1))

        yield update


@contextmanager
def plain_progress(labels: Mapping[str, str] | None = None,
                   clock: Callable[[], float] = time.monotonic) -> Iterator[ProgressFn]:
    """``[  12.3s] warm-up (untraced) 0/3`` when a stage starts, and again when it is done."""
    names = labels or {}
    start = clock()
    started: set[str] = set()
    finished: set[str] = set()

    def update(stage: str, done: int, total: int) -> None:
        complete = done >= total if total else True
        if stage in started and not (complete and stage not in finished):
            return
        started.add(stage)
        if complete:
            finished.add(stage)
        count = f" {done}/{total}" if total else ""
        state = " done" if complete and total else ""
        console.print(f"[{clock() - start:7.1f}s] {names.get(stage, stage)}{count}{state}",
                      markup=False, highlight=False, soft_wrap=True)

    yield update
