"""What a report page holds, before it is written as HTML or Markdown: sections of charts and tables.

A chart never holds the only copy of a figure: every :class:`Chart` carries the :class:`Table` of the
numbers it draws, and the writers put that table right below it. A :class:`Cell` keeps the raw value
it was given (the JSON's number, unrounded) beside the text people read, so a page can be checked
against the JSON it was built from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Cell", "Chart", "Column", "Note", "Page", "Section", "Table", "cell", "num_cell", "table", "text_cell"]


@dataclass(frozen=True, slots=True)
class Cell:
    """One table cell: the text people read and the value it stands for (sorting, checks)."""

    text: str
    value: float | int | str | None = None
    """The unrounded number (or the text itself); None for an empty cell."""


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: its header and whether it sorts as numbers."""

    label: str
    numeric: bool = False
    key: str = ""
    """The JSON field the column shows (``time_per_step_us``), for people and for checks; may be empty."""


@dataclass(frozen=True, slots=True)
class Table:
    """A table of figures; ``id`` is unique in the page."""

    id: str
    caption: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    note: str = ""
    """One line below the table (what was left out, what a unit means)."""


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart: a Vega-Lite spec with its data inline, a title, a text alternative and its table."""

    id: str
    title: str
    alt: str
    """What the chart shows, in words: screen readers, printed pages without colour, Markdown."""
    spec: dict[str, Any]
    """A Vega-Lite spec without ``config`` (the page and the static images bring their own)."""
    table: Table


@dataclass(frozen=True, slots=True)
class Note:
    """A paragraph between charts (a finding's message, a verdict's reason)."""

    text: str
    tone: str = ""
    """``warn`` or ``fail`` for emphasis; empty for plain text."""


@dataclass(frozen=True, slots=True)
class Section:
    """A titled part of the page: charts, tables and notes in order, and the charts it could not draw."""

    id: str
    title: str
    items: tuple[Chart | Table | Note, ...] = ()
    missing: tuple[str, ...] = ()
    """One line per chart the input cannot feed, saying which and why."""


@dataclass(frozen=True, slots=True)
class Page:
    """One report: a title, a verdict line, the sections and where the figures came from."""

    kind: str
    """``capture``, ``diagnosis``, ``verify``, ``doctor`` or ``gate``."""
    title: str
    verdict: str = ""
    tone: str = ""
    """``pass``, ``fail`` or ``warn``: the colour of the verdict line."""
    facts: tuple[tuple[str, str], ...] = ()
    """(label, value) pairs under the title: input, backend, steps..."""
    sections: tuple[Section, ...] = field(default=())

    @property
    def charts(self) -> tuple[Chart, ...]:
        """Every chart of the page, in order."""
        return tuple(i for s in self.sections for i in s.items if isinstance(i, Chart))

    @property
    def tables(self) -> tuple[Table, ...]:
        """Every table of the page (charts' tables included), in order."""
        out: list[Table] = []
        for s in self.sections:
            for i in s.items:
                if isinstance(i, Chart):
                    out.append(i.table)
                elif isinstance(i, Table):
                    out.append(i)
        return tuple(out)

    @property
    def missing(self) -> tuple[str, ...]:
        """Every chart the input could not feed, one line each."""
        return tuple(m for s in self.sections for m in s.missing)


def text_cell(value: Any) -> Cell:
    """A text cell; None is empty."""
    if value is None:
        return Cell("", None)
    return Cell(str(value), str(value))


def num_cell(value: Any, fmt: str | Callable[[float], str] = ",.1f") -> Cell:
    """A number cell formatted with ``fmt`` (a format spec or a function); None or NaN is empty."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return Cell("", None)
    text = fmt(value) if callable(fmt) else format(value, fmt)
    return Cell(text, value)


def cell(value: Any, fmt: str | Callable[[float], str] = ",.1f") -> Cell:
    """A number cell for numbers, a text cell for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return num_cell(value, fmt)
    return text_cell(value)


def table(id: str, caption: str, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], note: str = "") -> Table:
    """A :class:`Table` from lists."""
    return Table(id, caption, tuple(columns), tuple(tuple(r) for r in rows), note)
