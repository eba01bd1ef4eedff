"""Renderers of a ``verify --target`` / ``--bench`` report: the terminal view, JSON, Markdown."""

from __future__ import annotations

import json

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hlo_doctor.core.escape.markdown import md_cell
from hlo_doctor.verify.tpu_inference.results import TargetReport

__all__ = ["JSON_SCHEMA", "to_json", "to_markdown", "to_terminal"]

JSON_SCHEMA = "hlo-doctor.verify-target/1"


def to_json(report: TargetReport) -> str:
    """A ``verify --target`` / ``--bench`` report as JSON (schema ``hlo-doctor.verify-target/1``)."""
    return json.dumps({"schema": JSON_SCHEMA, **report.to_dict()}, indent=2, default=str) + "\n"


def to_markdown(report: TargetReport) -> str:
    """A ``verify --target`` / ``--bench`` report as Markdown."""
    status = "PASS" if report.passed else "FAIL"
    lines = [f"## hlo-doctor verify --target: {status} ({report.verdict})", "",
             f"Baseline `{report.baseline}` ({report.release}) vs treatment `{report.treatment}`; "
             f"{report.elapsed_s:.0f} s."]
    for level in report.levels:
        lines += ["", f"### {level.level} level", "", "| # | check | result | figure |", "|---|---|---|---|"]
        for c in level.checks:
            result = "pass" if c.passed else ("not run" if c.figure.startswith("not run") else "**FAIL**")
            lines.append(f"| {c.number} | {c.name} | {result} | {_md(c.figure)} |")
        lines += [f"- check {c.number} ({c.name}): {_md(c.detail)}" for c in level.checks if c.detail]
    for note in report.notes:
        lines += ["", f"Note: {note}"]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return md_cell(text)


def to_terminal(report: TargetReport) -> RenderableType:
    """The people's view (stderr): the verdict, then each level's checks."""
    status = "PASS" if report.passed else "FAIL"
    parts: list[RenderableType] = [
        Text(f"verify: {status} ({report.verdict})", style=f"bold {'green' if report.passed else 'red'}")]
    for level in report.levels:
        table = Table(show_edge=False, pad_edge=False, box=None, title=f"{level.level} level", title_justify="left")
        for col in ("#", "check", "result", "figure"):
            table.add_column(col, overflow="fold")
        for c in level.checks:
            result = (Text("pass", style="green") if c.passed else
                      Text("not run", style="yellow") if c.figure.startswith("not run") else
                      Text("FAIL", style="bold red"))
            table.add_row(str(c.number), c.name, result, c.figure)
        parts.append(table)
        parts += [Text(f"  check {c.number}: {c.detail}", style="red") for c in level.checks if not c.passed and c.detail]
    parts += [Text(f"note: {note}", style="dim") for note in report.notes]
    return Group(*parts)
