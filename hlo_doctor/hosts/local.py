"""Host files read in worker processes on this machine (``--jobs N``), or in this process (``--jobs 1``).

Each worker is ``python -m hlo_doctor.hosts.worker`` (it imports what reading needs, not the
command line), fed one host at a time. A worker that dies while reading a host (killed, out of
memory) is replaced and the host given to another once; a second death is that host's failure,
named by its file.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import IO

import hlo_doctor
from hlo_doctor.hosts.work import HostFailure, HostPart, HostTask, read_one
from hlo_doctor.hosts.worker import receive, send

Result = tuple[int, HostPart | HostFailure]
"""(index of the task, what its host gave)."""

ATTEMPTS = 2
"""Workers a host may take down before it counts as failed: one retry."""


def cores_available() -> int:
    """The CPU cores this process may run on (the default ``--jobs``)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


class InProcess:
    """``--jobs 1``: each host read in this process, one after another."""

    def run(self, tasks: Sequence[HostTask]) -> Iterator[Result]:
        """Each task's result, in order."""
        for i, task in enumerate(tasks):
            yield i, read_one(task)


@dataclass(slots=True)
class _Worker:
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    task: int | None = None

    @property
    def answers(self) -> IO[bytes]:
        assert self.proc.stdout is not None
        return self.proc.stdout


@dataclass(slots=True)
class LocalPool:
    """Up to ``jobs`` worker processes, each reading one host file at a time."""

    jobs: int
    _workers: list[_Worker] = field(default_factory=list)

    def _start(self) -> _Worker:
        env = dict(os.environ)
        # The package as this process imports it, whatever the worker's working folder.
        root = str(Path(hlo_doctor.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, "-m", "hlo_doctor.hosts.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, env=env)
        worker = _Worker(proc, log)
        self._workers.append(worker)
        return worker

    def run(self, tasks: Sequence[HostTask]) -> Iterator[Result]:
        """Each task's result, as the workers finish them."""
        pending = collections.deque(range(len(tasks)))
        deaths: collections.Counter[int] = collections.Counter()
        try:
            while pending or any(w.task is not None for w in self._workers):
                for worker in self._workers:
                    if worker.task is None and pending:
                        self._give(worker, pending.popleft(), tasks, pending)
                while pending and len(self._workers) < self.jobs:
                    self._give(self._start(), pending.popleft(), tasks, pending)
                busy = {w.answers.fileno(): w for w in self._workers if w.task is not None}
                if not busy:
                    continue
                for fd in wait(list(busy)):
                    worker = busy[fd]  # type: ignore[index]
                    i = worker.task
                    assert i is not None
                    try:
                        result = receive(worker.answers)
                    except (EOFError, OSError):
                        why = self._bury(worker)
                        deaths[i] += 1
                        if deaths[i] < ATTEMPTS:
                            pending.appendleft(i)
                        else:
                            yield i, HostFailure(tasks[i].path, f"the worker reading it died twice ({why})",
                                                 kind="died")
                        continue
                    worker.task = None
                    yield i, result
        finally:
            self.close()

    def _give(self, worker: _Worker, i: int, tasks: Sequence[HostTask], pending: collections.deque[int]) -> None:
        assert worker.proc.stdin is not None
        try:
            send(worker.proc.stdin, tasks[i])
        except OSError:
            # It died before taking the task: the task waits for the next worker.
            self._bury(worker)
            pending.appendleft(i)
            return
        worker.task = i

    def _bury(self, worker: _Worker) -> str:
        """Forget a dead worker; why it died (exit status, its last line on stderr)."""
        self._workers.remove(worker)
        code = worker.proc.wait()
        worker.log.seek(0)
        lines = worker.log.read().decode(errors="replace").strip().splitlines()
        worker.log.close()
        if code < 0:
            return f"killed by signal {-code}"
        # Its last words (an exception, the allocator giving up) say why it stopped.
        return f"exit status {code}" + (f": {lines[-1][:200]}" if lines else "")

    def close(self) -> None:
        """Stop every worker (their tasks, if any, are abandoned)."""
        for worker in self._workers:
            try:
                if worker.proc.stdin is not None:
                    worker.proc.stdin.close()
            except OSError:
                pass
            if worker.task is not None:
                worker.proc.kill()
        for worker in self._workers:
            try:
                worker.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
            worker.log.close()
        self._workers.clear()
