"""The MCP server's tools for rules, fixes and the gate (see :mod:`hlo_doctor.cli.mcp_tools`).

A fix is a dry run unless the call asks to write (``write``), the server was started with
``--allow-write``, and the catalog lists the fix as safe; a write then goes through the same
transaction as ``apply-fix --write`` (unsafe edits of a safe fix are left out, as without
``--unsafe``). The gate reads a policy only from the file a call names: the server never looks for a
pyproject.toml above its roots.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hlo_doctor.cli.mcp_answer import ToolAnswer, WorkerSettings
from hlo_doctor.cli.mcp_roots import Roots
from hlo_doctor.core.errors import InputError

__all__ = ["TOOLS"]

CATALOG_SCHEMA = "hlo-doctor.fix-catalog/1"


def rules(roots: Roots) -> ToolAnswer:
    """``rules --format json``'s document: every bundled rule, its severity and the fixes that serve it."""
    from hlo_doctor.cli.rules import JSON_SCHEMA, rule_row
    from hlo_doctor.lint import load_rulebook

    book = load_rulebook(())
    rows = [rule_row(r) for r in book.rules]
    doc = {"schema": JSON_SCHEMA, "rules": rows,
           "errors": [{"path": str(e.path), "reason": e.reason} for e in book.errors]}
    text = "\n".join(f"{r['code']} {r['name']} [{r['severity']}]: {r['summary']}"
                     + (f" (fixes: {', '.join(map(str, r['fixes']))})" if r["fixes"] else "")  # type: ignore[call-overload]
                     for r in rows)
    return ToolAnswer(text, doc)


def explain_rule(roots: Roots, code: str) -> ToolAnswer:
    """``rules explain CODE``: the rule's documentation as Markdown, beside its ``rules --format json`` row."""
    from hlo_doctor.cli.rules import JSON_SCHEMA, explain_markdown, known_rule, rule_row
    from hlo_doctor.lint import load_rulebook

    rule = known_rule(load_rulebook(()), code.strip().upper())
    text = explain_markdown(rule)
    return ToolAnswer(text, {"schema": JSON_SCHEMA, "rules": [rule_row(rule)], "explanation": text})


def fixes(roots: Roots) -> ToolAnswer:
    """``apply-fix --list``: every fix of the catalog, safe or unsafe, the rules it serves, what it edits."""
    from hlo_doctor.fixes.catalog import CATALOG

    entries = [{"fix": e.fix_id, "title": e.title, "safety": e.safety, "rules": list(e.rules),
                "edits": "a project folder" if e.scope == "tree" else "one file, at a line", "summary": e.summary}
               for e in CATALOG]
    text = "\n".join(f"{e['fix']} ({e['safety']}; {', '.join(e['rules'])}; {e['edits']}): {e['summary']}"
                     for e in entries)
    return ToolAnswer(text, {"schema": CATALOG_SCHEMA, "fixes": entries})


def fix(roots: Roots, settings: WorkerSettings, fix_id: str, path: str, line: int | None = None,
        argument: str = "", write: bool = False) -> ToolAnswer:
    """``apply-fix FIX FILE.py[:LINE]`` (a file fix) or ``apply-fix FIX --target DIR`` (a project fix):
    the diff of a dry run, or with ``write`` (safe fixes, a server started with --allow-write) applied."""
    from hlo_doctor.cli.apply_fix import JSON_SCHEMA
    from hlo_doctor.fixes import FixApplied, FixRefused, FixSkipped, apply_fix
    from hlo_doctor.fixes.catalog import catalog_entry
    from hlo_doctor.fixes.source.apply import apply_source_fix
    from hlo_doctor.fixes.source.base import Hint

    entry = catalog_entry(fix_id)
    if write and not settings.allow_write:
        raise InputError(f"fix {fix_id} {path}: this server does not write files (it was started without "
                         "--allow-write)", "call it without write for the diff, or start the server with "
                         "--allow-write to let it apply safe fixes")
    if write and not entry.safe:
        raise InputError(f"fix {fix_id}: unsafe (the catalog), so the server never writes it",
                         f"apply it yourself: hlo-doctor apply-fix {fix_id} FILE.py:LINE --unsafe --write, then "
                         "hlo-doctor verify")
    head, _, tail = path.rpartition(":")
    if line is None and tail.isdigit() and head.endswith(".py"):
        path, line = head, int(tail)  # a finding's fix_site, FILE.py:LINE, as given
    if entry.scope == "tree":
        given = roots.path(path, "target")
        target = _project_of(roots, given)
        if given.is_file():
            line = None  # a file of the project (a finding's fix_site): the project fix edits all of it
        if line is not None or argument:
            raise InputError(f"fix {fix_id}: edits a project folder, not a line",
                             "pass the project folder as path, without line or argument")
        result = apply_fix(fix_id, target, dry_run=not write)
    else:
        file = roots.path(path, "file", kind="file")
        if argument and fix_id != "donate-state":
            raise InputError(f"fix {fix_id}: argument is donate-state's (the argument to donate)",
                             "leave argument empty")
        # A dry run shows an unsafe fix's diff too (apply-fix --dry-run does); a write leaves unsafe edits out.
        result = apply_source_fix(fix_id, file, [(line, Hint(argument=argument))], dry_run=not write,
                                  unsafe=not write)
    doc = {"schema": JSON_SCHEMA, **result.to_dict()}
    if isinstance(result, FixApplied):
        # A safe fix's edit can be unsafe at one place (apply_source_fix says so in the variant).
        safety = "unsafe here: a write leaves it out" if result.variant == "unsafe" else entry.safety
        head = (f"{fix_id} ({safety}): " + ("dry run, nothing written" if result.dry_run
                                                  else f"applied to {', '.join(str(p) for p in result.files)}"))
        notes = [f"note: {n}" for n in result.notes]
        return ToolAnswer("\n".join([head, *notes]), doc, extra_text=(result.diff,) if result.diff else ())
    if isinstance(result, FixSkipped):
        return ToolAnswer(f"{fix_id}: skipped: {result.reason}", doc)
    assert isinstance(result, FixRefused)
    return ToolAnswer(f"{fix_id}: refused ({result.kind}): {result.reason}", doc, error=True)


def _project_of(roots: Roots, path: Path) -> Path:
    """The project folder a project fix edits: ``path`` if a folder, else the nearest folder above the
    file (inside the roots) that a project fix recognises (a finding's fix_site is a file of it)."""
    from hlo_doctor.core.errors import HloDoctorError
    from hlo_doctor.fixes.targets import detect_target

    if path.is_dir():
        return path
    for folder in path.parents:
        if not roots.holds(folder):
            break
        try:
            detect_target(folder)
        except HloDoctorError:
            continue
        return folder
    raise InputError(f"target {path}: no project folder a project fix knows holds it (inside the roots)",
                     "pass the project's folder (tpu_inference, or the engine's folder)")


def gate(roots: Roots, settings: WorkerSettings, baseline: str, candidate: str, policy: str = "",
         strict: bool = False, max_step_regression_pct: float | None = None,
         max_op_regression_pct: float | None = None, op_floor_us: float | None = None) -> ToolAnswer:
    """``gate BASELINE CANDIDATE --format json``'s verdict (``verdict``: pass / regression / inconclusive)."""
    from hlo_doctor.cli.gate import read_sides, side_memory
    from hlo_doctor.cli.hosts import pod_options
    from hlo_doctor.gate import gate as judge
    from hlo_doctor.gate import resolve_policy
    from hlo_doctor.render.registry import GATE, RenderOptions

    base = roots.path(baseline, "baseline")
    cand = roots.path(candidate, "candidate")
    policy_file = roots.path(policy, "policy", kind="file") if policy else None
    resolved = resolve_policy(policy_file, {"max_step_regression_pct": max_step_regression_pct,
                                            "max_op_regression_pct": max_op_regression_pct,
                                            "op_floor_us": op_floor_us}, search=False)
    options = pod_options(None, None, False)
    (base_stats, base_samples), (cand_stats, cand_samples) = read_sides(base, cand, options)
    result = judge(base_stats, cand_stats, resolved, strict=strict, baseline_label=str(base),
                   candidate_label=str(cand), baseline_memory=side_memory(base, base_stats),
                   candidate_memory=side_memory(cand, cand_stats), samples=(base_samples, cand_samples))
    doc: dict[str, Any] = json.loads(GATE.text("json", result, RenderOptions()))
    text = GATE.text("table", result, RenderOptions(rows=10))
    return ToolAnswer(text, doc)


TOOLS: dict[str, Callable[..., ToolAnswer]] = {"rules": rules, "explain_rule": explain_rule, "fixes": fixes, "fix": fix, "gate": gate}
"""Tool name -> function; ``fix`` and ``gate`` also take the server's settings."""
