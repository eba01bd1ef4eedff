"""The MCP server behind ``hlo-doctor mcp``: the tools as the protocol lists them, over stdio.

Each tool is a thin declaration (its inputs, described for the client) that hands the call to the
tool process (:class:`~hlo_doctor.cli.mcp_runner.ToolWorker`), where the stages run. A result holds
the command's JSON document as structured content and, as text, a short answer followed by the
same document (clients that read only text still get all of it). Bad input, a path outside the
roots and a call past the time limit are tool errors (``isError``) naming what was wrong: the
session goes on.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from hlo_doctor import __version__
from hlo_doctor.cli.mcp_answer import ToolAnswer
from hlo_doctor.cli.mcp_runner import ToolWorker

__all__ = ["build_server"]

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_PATH = "a path inside the server's --root folders (absolute, or relative to a root)"

Path_ = Annotated[str, Field(description=_PATH)]
Capture = Annotated[str, Field(description="the capture: a run directory, an xprof log directory's run folder, "
                                           "an .xplane.pb, a trace JSON or an opstats.json export; " + _PATH)]


def _result(answer: ToolAnswer) -> CallToolResult:
    if answer.error:
        raise ToolError(answer.text)
    blocks = [TextContent(type="text", text=t) for t in (answer.text, *answer.extra_text)]
    if answer.doc is not None:
        blocks.append(TextContent(type="text", text=json.dumps(answer.doc, indent=1)))
    return CallToolResult(content=blocks, structured_content=answer.doc)  # type: ignore[arg-type]


def build_server(worker: ToolWorker) -> MCPServer[Any]:
    """The server with every tool registered; each call runs in ``worker``."""
    roots = ", ".join(str(r) for r in worker.settings.roots)
    server: MCPServer[Any] = MCPServer(
        "hlo-doctor", version=__version__, log_level="WARNING",
        instructions=("hlo-doctor reads XProf captures of JAX programs: the op table, the step breakdown, the "
                      "findings (wasted work, where in the source, the fix that applies), a fix's diff, a gate "
                      f"verdict of two captures. Paths must lie inside: {roots}. Start with 'captures' on a log "
                      "directory, then 'diagnose' on a capture; 'fix' with a finding's fix id and fix_site gives "
                      "the diff."))

    def call(tool: str, **arguments: Any) -> CallToolResult:
        return _result(worker.call(tool, arguments))

    @server.tool(annotations=_READ)
    def captures(path: Annotated[str, Field(description="a log directory; " + _PATH)]) -> CallToolResult:
        """List the captures under a folder (xprof runs with their hosts, .xplane.pb files, trace JSONs,
        opstats.json exports), each with the path to pass to the other tools, its size, and the target
        and time a run.json records."""
        return call("captures", path=path)

    @server.tool(annotations=_READ)
    def op_table(path: Capture, top: Annotated[int, Field(ge=1, le=10_000, description="rows returned")] = 20,
                 module: Annotated[str, Field(description="only the ops of this module (name or glob, "
                                                          "e.g. 'jit_sample*')")] = "",
                 program_id: Annotated[int | None, Field(description="only the ops of this program id")] = None,
                 group_by: Annotated[Literal["op", "shape"], Field(description="'shape': rows summed by "
                                                                               "(opcode, shape)")] = "op",
                 ) -> CallToolResult:
        """The op-stats table of a capture ('hlo-doctor stats --format json'), most time per step first: per
        HLO op its module, program id, category, shape, time per step, % of the step, bytes, roofline and
        source line. 'rows' holds the top rows of the selection; 'selection' says how many matched."""
        return call("op_table", path=path, top=top, module=module, program_id=program_id, group_by=group_by)

    @server.tool(annotations=_READ)
    def step_breakdown(path: Capture) -> CallToolResult:
        """The step breakdown of a capture ('hlo-doctor stats --breakdown --format json'): per device and step,
        busy (the union of op intervals), idle, and what the host ran while the device idled (Python lines,
        dispatch, compile), with the source lines that filled the idle time."""
        return call("step_breakdown", path=path)

    @server.tool(annotations=_READ)
    def diagnose(path: Capture,
                 source: Annotated[str, Field(description="the project folder whose code the fixes may change "
                                                          "(where a finding's line is looked up); default: the "
                                                          "root that holds the capture")] = "",
                 select: Annotated[list[str] | None, Field(description="only these rules (codes or prefixes)")] = None,
                 ignore: Annotated[list[str] | None, Field(description="skip these rules")] = None,
                 what_if: Annotated[bool, Field(description="time a narrower reduction on this machine where an "
                                                            "XLA:CPU capture cannot price it (seconds of CPU)")] = False,
                 ) -> CallToolResult:
        """What is wasted in a capture and what fixes it ('hlo-doctor diagnose --format json'): each finding's
        rule, severity, op and shape, time per step, % of the step, bytes, the recoverable estimate, the
        source line, the evidence, and the fix that applies to that line (fix id, fix_site, fix_safety,
        fix_command in 'extra'). Pass a finding's fix and fix_site to 'fix' for the diff."""
        return call("diagnose", path=path, source=source, select=select, ignore=ignore, what_if=what_if)

    @server.tool(annotations=_READ)
    def rules() -> CallToolResult:
        """Every rule ('hlo-doctor rules --format json'): code, name, severity, what it flags, the fixes that
        serve it."""
        return call("rules")

    @server.tool(annotations=_READ)
    def explain_rule(code: Annotated[str, Field(description="a rule code, e.g. HD002")]) -> CallToolResult:
        """One rule's documentation ('hlo-doctor rules explain CODE'): what it flags, why it costs, an
        example, the fix, and its test examples."""
        return call("explain_rule", code=code)

    @server.tool(annotations=_READ)
    def fixes() -> CallToolResult:
        """The catalog of fixes ('hlo-doctor apply-fix --list'): id, safe or unsafe, the rules each serves,
        whether it edits one file at a line or a project folder."""
        return call("fixes")

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False))
    def fix(fix_id: Annotated[str, Field(description="a fix id from 'fixes' or a finding's 'fix'")],
            path: Annotated[str, Field(description="the Python file a file fix edits (or FILE.py:LINE), or the "
                                                   "project folder of a project fix (bf16-greedy-sampler) or a "
                                                   "file in it: a finding's fix_site as it stands; " + _PATH)],
            line: Annotated[int | None, Field(ge=1, description="the line (a finding's fix_site); default: "
                                                                "every place in the file")] = None,
            argument: Annotated[str, Field(description="donate-state only: the argument to donate")] = "",
            write: Annotated[bool, Field(description="apply it (only safe fixes, only on a server started with "
                                                     "--allow-write); default: a dry run")] = False,
            ) -> CallToolResult:
        """A fix's unified diff as a dry run ('hlo-doctor apply-fix FIX FILE.py[:LINE] --dry-run', or
        'apply-fix FIX --target DIR'): nothing is written unless write is true, the server allows writes
        and the catalog lists the fix as safe. A refusal (the code does not match) is a tool error with
        its reason."""
        return call("fix", fix_id=fix_id, path=path, line=line, argument=argument, write=write)

    @server.tool(annotations=_READ)
    def gate(baseline: Capture, candidate: Capture,
             policy: Annotated[str, Field(description="a policy TOML file ([tool.hlo-doctor.gate] of a "
                                                      "pyproject.toml, or a gate table); default: built-in")] = "",
             strict: Annotated[bool, Field(description="a change within noise is inconclusive")] = False,
             max_step_regression_pct: Annotated[float | None, Field(ge=0)] = None,
             max_op_regression_pct: Annotated[float | None, Field(ge=0)] = None,
             op_floor_us: Annotated[float | None, Field(ge=0)] = None,
             ) -> CallToolResult:
        """The CI gate's verdict on two captures ('hlo-doctor gate BASELINE CANDIDATE --format json'): pass,
        regression or inconclusive, the step-time change, the ops that regressed, vanished or appeared."""
        return call("gate", baseline=baseline, candidate=candidate, policy=policy, strict=strict,
                    max_step_regression_pct=max_step_regression_pct,
                    max_op_regression_pct=max_op_regression_pct, op_floor_us=op_floor_us)

    return server
