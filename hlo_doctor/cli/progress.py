"""Progress of a long command on stderr, driven by ``progress(stage, done, total)`` calls."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from hlo_doctor.cli.common import console
from hlo_doctor.core.model import ProgressFn

__all__ = ["progress_bars"]


@contextmanager
def progress_bars(labels: Mapping[str, str] | None = None, *, keep: bool = False,
                  label_width: int | None = None) -> Iterator[ProgressFn]:
    """One rich bar per stage; ``labels`` names the stages (else the stage itself is shown).

    ``keep`` leaves the finished bars on screen (a report that follows refers to them);
    ``label_width`` pads the labels so that the bars line up.
    """
    names = labels or {}
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
