"""CLI: ``hlo-doctor mcp --root DIR``: the tools as a Model Context Protocol server on stdio.

The server (:mod:`hlo_doctor.cli.mcp_server`) and its tools (:mod:`hlo_doctor.cli.mcp_tools`,
:mod:`hlo_doctor.cli.mcp_fix_tools`) are imported when the command runs: ``--help`` and the other
commands never load the protocol's libraries.
"""

from __future__ import annotations

from pathlib import Path

import click

from hlo_doctor.cli.common import console, examples, handle_errors


@click.command("mcp", epilog=examples(
    "hlo-doctor mcp --root ~/profiles                      # an MCP client starts this (docs/mcp.md)",
    "hlo-doctor mcp --root logs/ --root src/ --allow-write  # findings in logs/, safe fixes written in src/",
))
@click.option("--root", "roots", multiple=True, required=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A folder the tools may read (captures, source, policies); repeatable. Nothing outside "
                   "the roots is read or written, links that leave them included.")
@click.option("--allow-write", is_flag=True,
              help="Let the 'fix' tool write a safe fix when a call asks (write=true). Without it every fix "
                   "is a dry run.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300, show_default=True,
              metavar="SECONDS", help="Longest one tool call may run; past it the call is stopped and answered "
                                      "with an error, and the server goes on.")
@handle_errors
def mcp_cmd(roots: tuple[Path, ...], allow_write: bool, timeout_s: float) -> None:
    """Serve hlo-doctor's stages to MCP clients over stdio (JSON-RPC on stdin/stdout).

    \b
    Tools: captures, op_table, step_breakdown, diagnose, rules, explain_rule, fixes, fix, gate;
    each answers with the command's --format json document and a short text (docs/mcp.md).
    The protocol uses stdout; the server's log goes to stderr.
    """
    from hlo_doctor.cli.mcp_roots import Roots

    checked = Roots.of(roots)
    try:
        from hlo_doctor.cli.mcp_server import build_server
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith(("mcp", "pydantic")):
            raise
        from hlo_doctor.core.errors import NotAvailableError

        raise NotAvailableError(f"hlo-doctor mcp needs the mcp package ({exc.name} is not installed)",
                                "pip install 'mcp>=2.3,<3' (a dependency of hlo-doctor: reinstall it)") from exc
    from hlo_doctor.cli.mcp_answer import WorkerSettings
    from hlo_doctor.cli.mcp_runner import ToolWorker

    worker = ToolWorker(WorkerSettings(checked.folders, allow_write=allow_write, timeout_s=timeout_s))
    console.print(f"hlo-doctor mcp: serving on stdio; roots: {checked.listing()}"
                  + ("; safe fixes may be written" if allow_write else "; read-only"), markup=False, soft_wrap=True)
    try:
        build_server(worker).run("stdio")
    finally:
        worker.close()


COMMANDS = [mcp_cmd]
