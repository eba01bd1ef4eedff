"""The MCP server's tools that read captures: what is in a log directory, the op table, the step
breakdown, the findings. Each runs in the tool process (:mod:`hlo_doctor.cli.mcp_worker`), checks
every path against the roots first, calls the same stages as the command it stands for, and returns
that command's ``--format json`` document with a short text (:class:`ToolAnswer`).

The fixes, the rules and the gate are in :mod:`hlo_doctor.cli.mcp_fix_tools`; :func:`run_tool` serves
both.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.cli.mcp_answer import ToolAnswer, WorkerSettings
from hlo_doctor.cli.mcp_roots import Roots
from hlo_doctor.core.errors import InputError

if TYPE_CHECKING:
    from hlo_doctor.core.model import Finding
    from hlo_doctor.opstats import OpStats

__all__ = ["TOOLS", "run_tool"]

CAPTURES_SCHEMA = "hlo-doctor.captures/1"
MAX_CAPTURES = 500
"""Most captures one listing names (the rest are counted)."""


def _read(roots: Roots, path: str) -> OpStats:
    """The op stats of a capture inside the roots, as ``stats`` reads it (several hosts side by side)."""
    from hlo_doctor.cli.hosts import pod_options
    from hlo_doctor.hosts import read_capture

    stats, _ = read_capture(roots.path(path, "capture"), pod_options(None, None, False))
    return stats


def captures(roots: Roots, path: str) -> ToolAnswer:
    """The captures under a folder: xprof runs (``plugins/profile/<run>/*.xplane.pb``, one file per
    host), bare ``.xplane.pb`` files, trace JSONs and ``opstats.json`` exports; each with the path to
    pass to the other tools."""
    from hlo_doctor.opstats.io import read_run_info
    from hlo_doctor.trace.json_decode import TRACE_JSON_SUFFIXES
    from hlo_doctor.trace.read import XPLANE_SUFFIX

    folder = roots.path(path, "log directory", kind="dir")
    found: list[dict[str, Any]] = []
    runs: dict[Path, list[Path]] = {}
    for file in sorted(folder.rglob("*")):
        if not file.is_file():
            continue
        name = file.name
        if name.endswith(XPLANE_SUFFIX):
            runs.setdefault(file.parent, []).append(file)
        elif name.endswith(TRACE_JSON_SUFFIXES):
            found.append({"kind": "trace-json", "path": str(file), "bytes": file.stat().st_size})
        elif name == "opstats.json":
            found.append({"kind": "opstats-export", "path": str(file), "bytes": file.stat().st_size})
    for run, files in sorted(runs.items()):
        # <run dir>/plugins/profile/<run>/<host>.xplane.pb: the run dir's run.json says what was captured.
        in_run_dir = len(run.parents) >= 3 and run.parent.name == "profile" and run.parent.parent.name == "plugins"
        run_dir = run.parents[2] if in_run_dir else None
        info = read_run_info(run_dir / "run.json") if run_dir is not None and (run_dir / "run.json").is_file() else None
        found.append({"kind": "xprof-run" if in_run_dir else "xplane-folder", "path": str(run),
                      "run_dir": str(run_dir) if run_dir is not None else None, "run": run.name,
                      "hosts": [f.name[: -len(XPLANE_SUFFIX)] for f in files],
                      "bytes": sum(f.stat().st_size for f in files),
                      "target": info.target if info else None, "created": info.created if info else None,
                      "backend": info.backend if info else None})
    found.sort(key=lambda c: str(c["path"]))
    doc = {"schema": CAPTURES_SCHEMA, "folder": str(folder), "count": len(found), "captures": found[:MAX_CAPTURES]}
    lines = [f"{len(found)} capture(s) under {folder}"]
    for c in found[:MAX_CAPTURES]:
        hosts = f", {len(c['hosts'])} host(s)" if "hosts" in c else ""
        target = f", target {c['target']}" if c.get("target") else ""
        lines.append(f"- {c['path']} ({c['kind']}{hosts}, {c['bytes']:,} bytes{target})")
    if len(found) > MAX_CAPTURES:
        lines.append(f"... and {len(found) - MAX_CAPTURES} more")
    return ToolAnswer("\n".join(lines), doc)


def op_table(roots: Roots, path: str, top: int = 20, module: str = "", program_id: int | None = None,
             group_by: str = "op") -> ToolAnswer:
    """``stats --format json``'s document with ``rows`` cut to the top ``top`` rows of the selection
    (``module``: a module name or glob; ``program_id``), or grouped by (opcode, shape)."""
    import fnmatch

    from hlo_doctor.cli.profile import header_line
    from hlo_doctor.core.format import json_safe
    from hlo_doctor.opstats import group_by_shape, to_json

    if group_by not in ("op", "shape"):
        raise InputError(f"group_by {group_by!r}: not op or shape", "pass group_by 'op' or 'shape'")
    if top < 1:
        raise InputError(f"top {top}: not a positive number", "pass top >= 1")
    stats = _read(roots, path)
    table = stats.table
    if module:
        table = table[[fnmatch.fnmatchcase(str(m), module) for m in table["module"]]]
    if program_id is not None:
        table = table[table["program_id"] == program_id]
    matched = len(table)
    rows_table = group_by_shape(table) if group_by == "shape" else table
    rows = [{k: json_safe(v) for k, v in rec.items()} for rec in rows_table.head(top).to_dict(orient="records")]
    from hlo_doctor.cli.profile import compile_summary

    doc = json.loads(to_json(stats, per_step=False, compact=True, compiles=compile_summary(stats)))
    doc["rows"] = rows
    doc["selection"] = {"top": top, "module": module or None, "program_id": program_id, "group_by": group_by,
                        "rows_in_table": len(stats.table), "rows_matched": matched, "rows_shown": len(rows)}
    lines = [header_line(stats), f"{matched} of {len(stats.table)} rows match; the top {len(rows)}"
             + (" grouped by (opcode, shape)" if group_by == "shape" else "") + ":"]
    for r in rows:
        if group_by == "shape":
            lines.append(f"{r['rank']}. {r['opcode']} {r['shape']}: {r['time_per_step_us']:,.1f} us/step "
                         f"({r['pct_of_step']:.1f}%), {r['ops']} op(s) in {r['modules']}")
        else:
            src = f" at {r['source']}" if r.get("source") else ""
            lines.append(f"{r['rank']}. {r['module']} {r['op']} ({r['category']}, {r['shape']}): "
                         f"{r['time_per_step_us']:,.1f} us/step ({r['pct_of_step']:.1f}%){src}")
    lines.extend(f"note: {w}" for w in stats.warnings)
    return ToolAnswer("\n".join(lines), doc)


def step_breakdown(roots: Roots, path: str) -> ToolAnswer:
    """``stats --breakdown --format json``'s document: per device and step, busy, idle and what the
    host ran while the device idled, with the source lines that filled the idle time."""
    from hlo_doctor.core.format import fmt_duration, json_safe

    stats = _read(roots, path)
    b = stats.breakdown
    if b is None:
        raise InputError(f"{stats.source_path}: no step breakdown (an opstats.json written before it, or "
                         "without --per-step)", "pass the run directory or the .xplane.pb")
    doc = json_safe(b.to_dict())
    summary = doc["summary"]
    lines = [f"{stats.source_path}: per step {fmt_duration(summary['wall_us'])} wall, "
             f"{fmt_duration(summary['busy_us'])} device busy, {fmt_duration(summary['idle_us'])} idle "
             f"({summary['idle_pct']:.1f}%)"]
    kinds = sorted(summary["idle_by_kind_us"].items(), key=lambda kv: -kv[1])
    if kinds:
        lines.append("idle while the host ran: " + ", ".join(f"{k} {fmt_duration(v)}" for k, v in kinds if v > 0))
    for line in doc["lines"][:10]:
        lines.append(f"- {line.get('source') or line.get('where', '')}: {fmt_duration(line.get('idle_us', 0.0))} idle "
                     f"({line.get('kind', '')})")
    lines.extend(f"note: {n}" for n in b.notes)
    return ToolAnswer("\n".join(lines), doc)


def finding_line(f: Finding) -> str:
    """One finding as an answer states it: what, how much, where, and the fix that applies."""
    from hlo_doctor.core.format import fmt_bytes, fmt_duration

    extra = dict(f.extra)
    size = []
    if f.time_per_step_us is not None:
        size.append(f"{fmt_duration(f.time_per_step_us)}/step"
                    + (f" ({f.pct_of_step:.1f}% of the step)" if f.pct_of_step is not None else ""))
    if f.recoverable_us is not None:
        size.append(f"~{fmt_duration(f.recoverable_us)}/step recoverable")
    if f.bytes_accessed:
        size.append(f"{fmt_bytes(f.bytes_accessed)} accessed")
    where = f" at {f.source}" if f.source else ""
    op = " ".join(x for x in (f.module, f.op, f.shape) if x)
    if f.fix:
        fix = (f"fix: {f.fix} ({extra.get('fix_safety', '')}) at {extra.get('fix_site', '')}; "
               f"`{extra.get('fix_command', '')}`")
    else:
        fix = "fix: none applies to code under the server's folders"
    return (f"{f.code} [{f.severity}] {f.name}{where}: {op}; " + ", ".join(size) + f"; {fix}\n  {f.message}")


def diagnose(roots: Roots, path: str, source: str = "", select: list[str] | None = None,
             ignore: list[str] | None = None, what_if: bool = False) -> ToolAnswer:
    """``diagnose --format json``'s document: the findings (what, where, how much, the fix that
    applies in ``source``: a project folder inside the roots, default the root holding the capture)."""
    from hlo_doctor.fixes.source.applicable import with_applicable_fixes
    from hlo_doctor.hosts import CaptureReader
    from hlo_doctor.lint import diagnose as run_rules
    from hlo_doctor.lint import load_context, load_rulebook
    from hlo_doctor.render.registry import DIAGNOSIS, RenderOptions

    capture = roots.path(path, "capture")
    project = roots.path(source, "source", kind="dir") if source else next(
        r for r in roots.folders if capture == r or capture.is_relative_to(r))
    from hlo_doctor.cli.hosts import pod_options

    book = load_rulebook(())
    reader = CaptureReader(pod_options(None, None, False))
    ctx = dataclasses.replace(load_context(capture, source_root=project, reader=reader), what_if=what_if)
    result = run_rules(ctx, book, select=list(select or ()), ignore=list(ignore or ()))
    result = dataclasses.replace(result, findings=with_applicable_fixes(result.findings, project))
    options = RenderOptions(source_root=project, rulebook=book, command_line="")
    doc = json.loads(DIAGNOSIS.text("json", result, options))
    lines = [f"{capture}: {result.summary_line()}", *(finding_line(f) for f in result.findings)]
    if result.stage_line:
        lines.append(f"note: {result.stage_line}")
    return ToolAnswer("\n".join(lines), doc)


def _tools() -> dict[str, Callable[..., ToolAnswer]]:
    from hlo_doctor.cli import mcp_fix_tools

    return {"captures": captures, "op_table": op_table, "step_breakdown": step_breakdown, "diagnose": diagnose,
            **mcp_fix_tools.TOOLS}


TOOLS = ("captures", "op_table", "step_breakdown", "diagnose")
"""The tools of this module (the others: :data:`hlo_doctor.cli.mcp_fix_tools.TOOLS`)."""


def run_tool(settings: WorkerSettings, tool: str, arguments: dict[str, Any]) -> ToolAnswer:
    """Run one tool call; :class:`InputError` for bad input (the server answers it as a tool error)."""
    tools = _tools()
    if tool not in tools:
        raise InputError(f"unknown tool {tool!r}", f"known: {', '.join(sorted(tools))}")
    roots = Roots.of(settings.roots)
    if tool in ("fix", "gate"):
        return tools[tool](roots, settings, **arguments)
    return tools[tool](roots, **arguments)
