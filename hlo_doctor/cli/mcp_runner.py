"""The MCP server's side of the process that runs its tools (``python -m hlo_doctor.cli.mcp_worker``).

Every tool call runs there, in one long-lived child process, so that a call past its time limit is
stopped for real (the child's process group is killed; the next call starts a new child) and nothing
a stage or a library does (a crash, a line printed on stdout) can reach the protocol's stream.
Messages are :mod:`hlo_doctor.hosts.worker`'s (a pickle behind its length, both ends this package).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import IO, Any

from hlo_doctor.cli.mcp_answer import READY, START_S, ToolAnswer, WorkerSettings
from hlo_doctor.hosts.worker import receive, send

__all__ = ["ToolWorker"]


class ToolWorker:
    """The server's side: one child at a time, started on the first call, killed past the time limit."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _child(self) -> subprocess.Popen[bytes] | None:
        """The running child, or a new one once it says it is ready (None: it could not start)."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        proc = subprocess.Popen([sys.executable, "-m", "hlo_doctor.cli.mcp_worker"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                # Its own process group: a stop ends the host readers it started too.
                                start_new_session=True)
        # Starting (the stages' modules imported) is not counted in a call's time limit.
        ready, _ = self._exchange(proc, self.settings, max(START_S, self.settings.timeout_s))
        if ready != READY:
            self._stop(proc)
            return None
        self._proc = proc
        return proc

    def _exchange(self, proc: subprocess.Popen[bytes], message: object, limit_s: float) -> tuple[Any, bool]:
        """Send ``message``, wait at most ``limit_s`` for the answer: (the answer or None, whether it ran past)."""
        answer: list[Any] = []

        def exchange(stdin: IO[bytes], stdout: IO[bytes]) -> None:
            try:
                send(stdin, message)
                answer.append(receive(stdout))
            except (EOFError, OSError):
                pass  # the child stopped: no answer

        assert proc.stdin is not None and proc.stdout is not None
        t = threading.Thread(target=exchange, args=(proc.stdin, proc.stdout), daemon=True)
        t.start()
        t.join(limit_s)
        if t.is_alive():
            self._stop(proc)
            t.join(5)
            return None, True
        return (answer[0] if answer else None), False

    def call(self, tool: str, arguments: dict[str, Any]) -> ToolAnswer:
        """Run ``tool`` in the child and wait for its answer, at most ``timeout_s`` (then kill it).

        Blocking: the server calls it from a worker thread. Calls are served one at a time; the time
        limit counts from when this call's turn comes and the child is ready.
        """
        with self._lock:
            proc = self._child()
            if proc is None:
                return ToolAnswer(f"{tool}: the process that runs the tools did not start - see the server's "
                                  "log (stderr)", error=True)
            answer, late = self._exchange(proc, (tool, arguments), self.settings.timeout_s)
            if late:
                self._proc = None
                return ToolAnswer(f"{tool}: stopped after {self.settings.timeout_s:g} s (the server's --timeout); "
                                  "pass a smaller input (one host file, a shorter capture) or start the server "
                                  "with a longer --timeout", error=True)
            if not isinstance(answer, ToolAnswer):
                if proc.poll() is None:
                    self._stop(proc)
                self._proc = None
                return ToolAnswer(f"{tool}: the process running the tools stopped (exit code {proc.returncode}) "
                                  "- the next call starts a new one; see the server's log (stderr)", error=True)
            return answer

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.wait()

    def close(self) -> None:
        """End the child: its stdin closed (it returns), killed if it does not within 5 s."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self._stop(proc)
