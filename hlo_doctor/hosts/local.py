"""Host files read in worker processes on this machine (``--jobs N``), or in this process (``--jobs 1``).

Each worker is ``python -m hlo_doctor.hosts.worker`` (it imports what reading needs, not the
command line), fed one host at a time. A worker that dies while reading a host (killed, out of
memory) is replaced and the host given to another once; a second death is that host's failure,
named by its file.

The workers can start before the command knows the capture's frame paths (:meth:`LocalPool.begin`,
then :meth:`LocalPool.send_frame_paths`): they read their hosts while the command parses the HLO
modules.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import IO

import hlo_doctor
from hlo_doctor.core.blas import reading_env
from hlo_doctor.hosts.work import FramePathsFile, HostFailure, HostPart, HostTask, read_one
from hlo_doctor.hosts.worker import receive, send

Result = tuple[int, HostPart | HostFailure]
"""(index of the task, what its host gave)."""

ATTEMPTS = 2
"""Workers a host may take down before it counts as failed: one retry."""

HOST_TIMEOUT_S = 600.0
"""How long a worker may read one host file before it counts as dead (stopped, hung): killed, and the
host given to another once (``--host-timeout``)."""


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
    since: float = 0.0
    """When it was given its task (``time.monotonic``)."""

    @property
    def answers(self) -> IO[bytes]:
        assert self.proc.stdout is not None
        return self.proc.stdout


@dataclass(slots=True)
class LocalPool:
    """Up to ``jobs`` worker processes, each reading one host file at a time."""

    jobs: int
    timeout_s: float = HOST_TIMEOUT_S
    """How long one host's read may take in a worker (see :data:`HOST_TIMEOUT_S`)."""
    _workers: list[_Worker] = field(default_factory=list)
    _tasks: Sequence[HostTask] = ()
    _pending: collections.deque[int] = field(default_factory=collections.deque)
    _deaths: collections.Counter[int] = field(default_factory=collections.Counter)
    _paths_file: FramePathsFile | None = None
    _tmp: str | None = None

    def _start(self) -> _Worker:
        env = dict(os.environ)
        # The package as this process imports it, whatever the worker's working folder.
        root = str(Path(hlo_doctor.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        reading_env(env)  # a worker only reads: no BLAS threads
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, "-m", "hlo_doctor.hosts.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, env=env)
        worker = _Worker(proc, log)
        self._workers.append(worker)
        if self._paths_file is not None:
            self._tell(worker, self._paths_file)
        return worker

    def run(self, tasks: Sequence[HostTask]) -> Iterator[Result]:
        """Each task's result, as the workers finish them."""
        self.begin(tasks)
        yield from self.results()

    def begin(self, tasks: Sequence[HostTask]) -> None:
        """Start the workers on ``tasks`` now; :meth:`results` collects them."""
        self._tasks = tasks
        self._pending = collections.deque(range(len(tasks)))
        self._deaths = collections.Counter()
        self._fill()

    def send_frame_paths(self, paths: tuple[tuple[str, str], ...]) -> None:
        """Tell every worker, and every worker started later, the capture's frame paths (for tasks
        whose paths follow)."""
        self._tmp = self._tmp or tempfile.mkdtemp(prefix="hlo-doctor-pool-")
        self._paths_file = FramePathsFile.write(os.path.join(self._tmp, "frame-paths.pickle"), paths)
        for worker in list(self._workers):
            self._tell(worker, self._paths_file)

    def _tell(self, worker: _Worker, message: object) -> None:
        assert worker.proc.stdin is not None
        try:
            send(worker.proc.stdin, message)
        except OSError:
            pass  # it died: its answers' end says so, and its task goes to another worker

    def _fill(self) -> None:
        for worker in self._workers:
            if worker.task is None and self._pending:
                self._give(worker, self._pending.popleft(), self._tasks, self._pending)
        while self._pending and len(self._workers) < self.jobs:
            self._give(self._start(), self._pending.popleft(), self._tasks, self._pending)

    def results(self) -> Iterator[Result]:
        """Each task of :meth:`begin` with its result, as the workers finish them; the workers stop at the end."""
        pending = self._pending
        try:
            while pending or any(w.task is not None for w in self._workers):
                self._fill()
                busy = {w.answers.fileno(): w for w in self._workers if w.task is not None}
                if not busy:
                    continue
                now = time.monotonic()
                left = min(w.since for w in busy.values()) + self.timeout_s - now
                ready = wait(list(busy), timeout=max(left, 0.0))
                for fd in ready:
                    worker = busy[fd]  # type: ignore[index]
                    i = worker.task
                    assert i is not None
                    try:
                        result = receive(worker.answers)
                    except (EOFError, OSError):
                        yield from self._lost(i, f"died twice ({self._bury(worker)})")
                        continue
                    worker.task = None
                    yield i, result
                # A worker that has not answered in time (stopped, hung) is killed, and its host retried.
                now = time.monotonic()
                for worker in [w for w in busy.values() if w.task is not None and w.answers.fileno() not in ready
                               and now - w.since >= self.timeout_s]:
                    i = worker.task
                    assert i is not None
                    worker.proc.kill()
                    self._bury(worker)
                    yield from self._lost(i, f"did not answer within {self.timeout_s:g} s, twice (stopped or "
                                             f"hung; a larger file may need a longer --host-timeout)")
        finally:
            self.close()

    def _lost(self, i: int, what: str) -> Iterator[Result]:
        """Task ``i`` lost with its worker: given to another once, else that host's failure."""
        self._deaths[i] += 1
        if self._deaths[i] < ATTEMPTS:
            self._pending.appendleft(i)
            return
        yield i, HostFailure(self._tasks[i].path, f"the worker reading it {what}", kind="died")

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
        worker.since = time.monotonic()

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
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp, self._paths_file = None, None
