"""What ``apply-fix`` prints for people (stderr): a fix's outcome, and the outcomes of ``--from``."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from hlo_doctor.cli.common import console, print_wide
from hlo_doctor.fixes import FixApplied, FixResult, FixSkipped
from hlo_doctor.fixes.source.apply import FILE_KIND
from hlo_doctor.fixes.source.from_run import FromRun

__all__ = ["print_from_run", "print_summary"]

_STATE_STYLE = {"original": "yellow", "fixed": "green", "missing": "red"}
_STATUS_STYLE = {"applied": "green", "dry-run": "green", "already-applied": "green", "unsafe": "yellow",
                 "no-fix": "dim", "refused": "red", "no-pattern": "red", "not-written": "red"}


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it (shorter to read)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _elements(result: FixResult) -> None:
    if result.target_kind == FILE_KIND:
        for e in result.elements:
            style = "green" if e.detail.startswith("safe") else "yellow"
            console.print(f"  {escape(e.where)}: {escape(e.title)} [{style}]{escape(e.detail)}[/]", soft_wrap=True)
        return
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("part", justify="right")
    table.add_column("element", max_width=40)
    table.add_column("found", no_wrap=True)
    table.add_column("where", min_width=20, overflow="fold")
    for element in result.elements:
        style = _STATE_STYLE.get(element.state, "")
        table.add_row(str(element.part), escape(element.title), f"[{style}]{escape(element.state)}[/]",
                      escape(element.where))
    print_wide(table)


def print_summary(result: FixResult, show_diff: bool = False) -> None:
    """One fix's outcome: what it found, what it changed (or would), the notes, the manifest."""
    release = f", release [bold]{escape(result.release)}[/]" if result.release else ""
    console.print(f"[bold]{escape(result.fix_id)}[/] on {escape(result.target_kind)}{release}")
    if result.recovered:
        console.print(f"[yellow]recovered:[/] {escape(result.recovered)}", soft_wrap=True)
    if result.elements:
        _elements(result)
    if isinstance(result, FixApplied):
        verb = "reverted" if result.reverted else ("would change" if result.dry_run else "changed")
        console.print(f"[green]{verb}[/] {len(result.files)} file(s):")
        for path in result.files:
            console.print(f"  {escape(_shown(path))}")
        if not result.reverted and result.target_kind != FILE_KIND:
            console.print(f"parts applied: {', '.join(str(p) for p in result.parts_applied) or 'none'} "
                          f"(variant {escape(result.variant)})")
        for note in result.notes:
            console.print(f"[dim]note:[/] {escape(note)}", soft_wrap=True)
        if result.manifest_path is not None:
            console.print(f"manifest: {escape(_shown(result.manifest_path))} (revert with --revert)")
        if show_diff and result.diff:
            console.print(Syntax(result.diff, "diff", theme="ansi_dark", word_wrap=True))
    elif isinstance(result, FixSkipped):
        console.print(f"[green]{escape(result.kind)}[/]: {escape(result.reason)}", soft_wrap=True)
    else:
        if result.kind == "half-fixed":
            console.print(f"[bold yellow]{escape(result.reason)}[/]", soft_wrap=True)
        else:
            console.print(f"[bold red]refused ({escape(result.kind)}):[/] {escape(result.reason)}", soft_wrap=True)
        for anchor in result.missing_anchors:
            console.print(f"  [red]not found:[/] {escape(anchor)}", soft_wrap=True)


def print_from_run(outcome: FromRun) -> None:
    """One line per finding of ``--from``: its rule and op, the fix, where, what happened and why."""
    table = Table(header_style="bold", box=None, pad_edge=False)
    for col in ("rule", "op", "fix", "where", "status"):
        table.add_column(col, no_wrap=True)
    table.add_column("detail", overflow="fold")
    for o in outcome.outcomes:
        style = _STATUS_STYLE.get(o.status, "")
        table.add_row(escape(o.code), escape(o.op), escape(o.fix_id or "-"), escape(o.where or "-"),
                      f"[{style}]{escape(o.status)}[/]" if style else escape(o.status), escape(o.detail))
    print_wide(table)
    if outcome.refused:
        console.print("[bold red]refused:[/] a fix no longer matches its line; nothing was written", soft_wrap=True)
    for path in outcome.manifests:
        console.print(f"manifest: {escape(_shown(path))} (revert with apply-fix FIX FILE --revert)")
    if outcome.dry_run and not outcome.refused:
        console.print("[dim]dry run: nothing written (--write applies)[/]")
