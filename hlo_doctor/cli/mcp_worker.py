"""The process that runs the MCP server's tools: ``python -m hlo_doctor.cli.mcp_worker``.

Started by :class:`hlo_doctor.cli.mcp_runner.ToolWorker`. It reads the settings, imports the stages,
says it is ready, then answers each ``(tool, arguments)`` with one
:class:`~hlo_doctor.cli.mcp_answer.ToolAnswer` until stdin closes. Bad input is an answer with
``error`` set (the ``InputError``'s one line); so is a bug, whose traceback goes to stderr.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from hlo_doctor.cli.mcp_answer import READY, ToolAnswer, WorkerSettings
from hlo_doctor.hosts.worker import receive, send

__all__ = ["main"]


def _answer(settings: WorkerSettings, tool: str, arguments: dict[str, Any]) -> ToolAnswer:
    from hlo_doctor.cli.mcp_tools import run_tool
    from hlo_doctor.core.errors import HloDoctorError

    try:
        return run_tool(settings, tool, arguments)
    except HloDoctorError as exc:
        return ToolAnswer(exc.one_line(), error=True)
    except Exception as exc:  # noqa: BLE001 - a bug answers this call, never ends the server
        traceback.print_exc(file=sys.stderr)
        return ToolAnswer(f"{tool}: internal error: {type(exc).__name__}: {exc} - please report this with the "
                          "tool call and its input", error=True)


def main() -> None:
    """Serve tool calls until stdin closes."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    # Whatever a stage or a library prints goes to the server's log, never into the answers.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    calls = sys.stdin.buffer
    try:
        settings = receive(calls)
    except EOFError:
        return
    # Imported before the first call, not within its time limit.
    import hlo_doctor.cli.mcp_tools  # noqa: F401
    import hlo_doctor.hosts  # noqa: F401
    import hlo_doctor.lint  # noqa: F401
    import hlo_doctor.opstats  # noqa: F401

    send(answers, READY)
    while True:
        try:
            tool, arguments = receive(calls)
        except EOFError:
            return
        send(answers, _answer(settings, tool, arguments))


if __name__ == "__main__":
    main()
