"""Host files read on an existing Dask cluster (``--scheduler ADDRESS``; the ``distributed`` extra).

Each host is one task: :func:`~hlo_doctor.hosts.work.read_one` on its path, which the workers read
from shared storage; a worker that cannot see the path says so and the file's bytes are shipped
instead (a few at a time). What comes back is the host's sums (:class:`~hlo_doctor.hosts.work.HostPart`),
never its events. A worker that dies is handled by the scheduler: it gives the task to another
worker until its ``distributed.scheduler.allowed-failures`` is exhausted, then the host fails,
named by its file.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import InputError, NotAvailableError
from hlo_doctor.hosts.local import Result
from hlo_doctor.hosts.work import HostFailure, HostPart, HostTask, read_one

EXTRA_HINT = "pip install 'hlo-doctor[distributed]' (or drop --scheduler to read on this machine)"


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise NotAvailableError("--scheduler needs the 'distributed' package, which is not installed",
                                EXTRA_HINT) from None
    return distributed


class DaskCluster:
    """A client of the Dask scheduler at ``address`` (``tcp://host:8786``)."""

    def __init__(self, address: str, *, timeout_s: float = 20.0) -> None:
        distributed = _distributed()
        self.address = address
        self._paths: list[str] = []
        self._futures: set[Any] = set()
        self._killed = distributed.KilledWorker
        try:
            self.client = distributed.Client(address, timeout=f"{timeout_s}s", set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InputError(f"cannot reach the Dask scheduler at {address} ({type(exc).__name__}: {exc})",
                             "start one ('dask scheduler', then 'dask worker ADDRESS'), or drop --scheduler") from None

    def run(self, tasks: Sequence[HostTask]) -> Iterator[Result]:
        """Each task's result, as the cluster finishes them."""
        self._paths = [t.path for t in tasks]
        try:
            missing: list[int] = []
            for i, result in self._gather([(i, t, False) for i, t in enumerate(tasks)], len(tasks)):
                if isinstance(result, HostFailure) and result.kind == "missing":
                    missing.append(i)
                else:
                    yield i, result
            # The files the workers cannot see: their bytes, a few files in flight at a time.
            width = max(len(self.client.scheduler_info().get("workers", {})), 1)
            yield from self._gather([(i, tasks[i], True) for i in missing], width)
        except BaseException:
            # A command that stops early (a host it cannot use) leaves nothing running on the cluster.
            self.client.cancel(list(self._futures))
            raise

    def close(self) -> None:
        """Disconnect from the scheduler."""
        self.client.close()

    def _gather(self, todo: list[tuple[int, HostTask, bool]], limit: int) -> Iterator[Result]:
        """Run ``todo`` (index, task, ship its bytes) with at most ``limit`` tasks on the cluster at
        once; the results as they come."""
        distributed = _distributed()
        queue = distributed.as_completed(loop=self.client.loop)
        index: dict[Any, tuple[int, Any]] = {}
        waiting = iter(todo)

        def submit_next() -> None:
            nxt = next(waiting, None)
            if nxt is None:
                return
            i, task, ship = nxt
            key = f"hlo-doctor-host-{uuid.uuid4().hex}"
            if ship:
                # The bytes go to a worker as data of their own, not inside the task.
                data = self.client.scatter(_file_bytes(task), hash=False)
                future = self.client.submit(read_shipped, task, data, pure=False, key=key)
            else:
                data, future = None, self.client.submit(read_one, task, pure=False, key=key)
            index[future] = (i, data)
            self._futures.add(future)
            queue.add(future)

        for _ in range(limit):
            submit_next()
        for future in queue:
            i, data = index.pop(future)
            try:
                result = future.result()
            except self._killed as exc:
                result = HostFailure(self._paths[i], f"the workers reading it died ({exc})", kind="died")
            finally:
                self._futures.discard(future)
                future.release()
                if data is not None:
                    data.release()
            submit_next()
            yield i, result


def read_shipped(task: HostTask, data: bytes) -> HostPart | HostFailure:
    """:func:`read_one` of a task whose file's bytes were shipped to the worker."""
    return read_one(dataclasses.replace(task, data=data))


def _file_bytes(task: HostTask) -> bytes:
    """The task's file as this machine sees it (its path as the command was given it)."""
    try:
        return Path(task.path).read_bytes()
    except OSError as exc:
        raise InputError(f"{task.path}: cannot read ({exc.strerror})", "check the path and permissions") from exc
