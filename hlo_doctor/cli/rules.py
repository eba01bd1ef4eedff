"""CLI: ``rules`` (list the rules, with the fixes of the catalog that serve each) and ``rules explain CODE``
(one rule's documentation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hlo_doctor.cli.common import (
    FormatChoice,
    console,
    examples,
    handle_errors,
    output_option,
    plain_text,
    print_wide,
    write_output,
)
from hlo_doctor.core.errors import InputError

if TYPE_CHECKING:
    from hlo_doctor.lint import LoadedRule, RuleBook

_RULES_OPTION = click.option("--rules", "rules_dirs", multiple=True, type=click.Path(path_type=Path),
                             help="Also load the rule files of this folder; repeatable.")


def _fixes(r: LoadedRule) -> list[str]:
    """The catalog's fixes for the rule (``id (safe)``), and the one the rule names if the catalog has none."""
    from hlo_doctor.fixes.catalog import fixes_for_rule

    served = [f"{e.fix_id} ({e.safety})" for e in fixes_for_rule(r.code)] if r.bundled else []
    if r.rule.fix and not any(f.startswith(f"{r.rule.fix} ") for f in served):
        served.append(r.rule.fix)
    return served


def _row(r: LoadedRule) -> dict[str, object]:
    return {"code": r.code, "name": r.rule.name, "severity": str(r.rule.severity),
            "requires": list(r.rule.requires), "fix": r.rule.fix, "fixes": _fixes(r), "summary": r.rule.summary(),
            "bundled": r.bundled, "path": str(r.path),
            "examples": {"valid": len(r.rule.VALID), "invalid": len(r.rule.INVALID)}}


def _print_errors(book: RuleBook) -> None:
    for e in book.errors:
        console.print(f"[bold red]rule file not loaded:[/] {escape(str(e.path))}: {escape(str(e.reason))}", soft_wrap=True)


JSON_SCHEMA = "hlo-doctor.rules/1"


@click.group("rules", invoke_without_command=True, epilog=examples(
    "hlo-doctor rules                                       # the table",
    "hlo-doctor rules --format json -o rules.json",
    "hlo-doctor rules explain HD002",
))
@_RULES_OPTION
@click.option("--format", "fmt", type=FormatChoice(["table", "json", "md"], {"rich": "table"}), default="table",
              show_default=True, help="table: for people on stderr; json/md: on stdout or --output.")
@output_option()
@click.pass_context
@handle_errors
def rules_cmd(ctx: click.Context, rules_dirs: tuple[Path, ...], fmt: str, output: Path | None) -> None:
    """List the rules (bundled, plus those of --rules folders). 'rules explain CODE' shows one."""
    ctx.obj = rules_dirs
    if ctx.invoked_subcommand is not None:
        return
    from hlo_doctor.lint import load_rulebook

    book = load_rulebook(rules_dirs)
    rows = [_row(r) for r in book.rules]
    if fmt == "json":
        write_output(json.dumps({"schema": JSON_SCHEMA, "rules": rows, "errors": [{"path": str(e.path), "reason": e.reason}
                                                           for e in book.errors]}, indent=1) + "\n", output)
    elif fmt == "md":
        lines = ["| Code | Name | Severity | Requires | Fixes | What it flags |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['code']} | `{r['name']}` | {r['severity']} | {', '.join(r['requires'])} "  # type: ignore[arg-type]
                  f"| {', '.join(r['fixes']) or '-'} | {r['summary']} |" for r in rows]  # type: ignore[arg-type]
        write_output("\n".join(lines) + "\n", output)
    else:
        t = Table(header_style="bold")
        for col in ("code", "name", "severity", "requires", "fixes"):
            t.add_column(col, no_wrap=True)
        t.add_column("what it flags", overflow="fold", min_width=30)
        for r in book.rules:
            # User rules' names, summaries and paths are text, never markup.
            summary = Text(r.rule.summary().replace("``", ""))
            if not r.bundled:
                summary.append(f" ({r.path})", style="dim")
            t.add_row(Text(r.code), Text(r.rule.name), Text(str(r.rule.severity)), Text(", ".join(r.rule.requires)),
                      Text("\n".join(_fixes(r)) or "-"), summary)
        if output is not None:
            write_output(plain_text(t), output)
        else:
            print_wide(t)
    _print_errors(book)


@rules_cmd.command("explain", epilog=examples("hlo-doctor rules explain HD002", "hlo-doctor rules --rules my_rules explain HD101"))
@click.argument("code")
@_RULES_OPTION
@click.pass_context
@handle_errors
def explain_cmd(ctx: click.Context, code: str, rules_dirs: tuple[Path, ...]) -> None:
    """Print one rule's documentation (What it flags / Why it costs / Example / Fix) and its examples."""
    # rich's Markdown (markdown-it, pygments) only for this view.
    from rich.markdown import Markdown

    from hlo_doctor.lint import load_rulebook

    book = load_rulebook(tuple(ctx.obj or ()) + rules_dirs)
    rule = known_rule(book, code)
    console.print(Markdown(explain_markdown(rule)))


def known_rule(book: RuleBook, code: str) -> LoadedRule:
    """The rule ``code`` of ``book``; :class:`InputError` naming the known codes when there is none."""
    rule = book.get(code)
    if rule is None:
        known = ", ".join(r.code for r in book.rules)
        raise InputError(f"unknown rule id {code!r}", f"known rules: {known} ('hlo-doctor rules' lists them)")
    return rule


def rule_row(rule: LoadedRule) -> dict[str, object]:
    """One rule as ``rules --format json`` lists it."""
    return _row(rule)


def explain_markdown(rule: LoadedRule) -> str:
    """``rules explain``'s text: the rule's documentation (What it flags / Why it costs / Example / Fix),
    the fixes that serve it and its examples, as Markdown."""
    cls = rule.rule
    md = [f"# {cls.code} {cls.name}", "",
          f"severity **{cls.severity}** · requires {', '.join(cls.requires)}"
          + (f" · fixes {', '.join(f'`{f}`' for f in _fixes(rule))}" if _fixes(rule) else "")
          + f" · {rule.path}", "", cls.summary(), ""]
    for title, body in cls.doc_sections().items():
        md += [f"## {title}", "", body, ""]
    md += ["## Examples (each is a test)", ""]
    for kind, cases in (("valid (no finding)", cls.VALID), ("invalid", cls.INVALID)):
        for e in cases:
            expect = f" -> {', '.join(e.expect)}" if e.expect else ""
            md.append(f"- {kind}: {e.note or 'example'}{expect}")
    return "\n".join(md)


COMMANDS = [rules_cmd]
