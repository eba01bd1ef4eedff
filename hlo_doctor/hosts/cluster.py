"""Host files read on an existing Dask cluster (``--scheduler ADDRESS``; the ``distributed`` extra).

Each host is one task: :func:`~hlo_doctor.hosts.work.read_one` on its path, which the workers read
from shared storage; a worker that cannot see the path says so and the file's bytes are shipped
instead (a few at a time). What comes back is the host's sums (:class:`~hlo_doctor.hosts.work.HostPart`),
never its events. A worker that dies is handled by the scheduler: it gives the task to another
worker until its ``distributed.scheduler.allowed-failures`` is exhausted, then the host fails,
named by its file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import CancelledError
from typing import Any

from hlo_doctor.core.errors import InputError, NotAvailableError
from hlo_doctor.core.pyproject import env_seconds
from hlo_doctor.core.regular import read_regular_bytes
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


_HINT = "start one ('dask scheduler', then 'dask worker ADDRESS'), or drop --scheduler"


def _connect(distributed: Any, address: str, timeout_s: float) -> Any:
    """A client of ``address`` within ``timeout_s`` seconds, whatever the other end does.

    Dask's own ``timeout`` bounds the TCP connect; a server that accepts and never answers its
    handshake (or sends something else) can hold the client far longer, so the client is made in a
    thread and abandoned at the deadline: exit 2 in ``timeout_s`` plus a second or two.
    """
    box: dict[str, Any] = {}

    def make() -> None:
        try:
            box["client"] = distributed.Client(address, timeout=f"{timeout_s}s", set_as_default=False)
        except BaseException as exc:  # noqa: BLE001 - carried to the command's thread
            box["error"] = exc

    thread = threading.Thread(target=make, name="hlo-doctor-dask-connect", daemon=True)
    thread.start()
    thread.join(timeout_s + 1.0)
    if thread.is_alive():
        raise InputError(f"the Dask scheduler at {address} did not answer within {timeout_s:g} s (it accepted "
                         "the connection but never spoke Dask's protocol)", _HINT)
    exc = box.pop("error", None)
    if exc is not None:
        if isinstance(exc, (OSError, TimeoutError, ValueError, EOFError)) or "Comm" in type(exc).__name__:
            what = f"{type(exc).__name__}: {str(exc)[:200]}"
            # The half-made client lives in the error's traceback; dropped now, or its __del__ waits
            # 40 s at exit for a scheduler that is not one (and prints a traceback).
            exc.__traceback__ = None
            del exc
            gc.collect()
            raise InputError(f"cannot reach the Dask scheduler at {address} ({what})", _HINT)
        raise exc
    return box["client"]


_POLL_S = 0.05
"""How often a wait for the cluster's next result looks again."""


CONNECT_TIMEOUT_S = 20.0
"""How long the scheduler has to answer the client's connection (``HLO_DOCTOR_SCHEDULER_TIMEOUT``)."""

CONNECT_TIMEOUT_ENV = "HLO_DOCTOR_SCHEDULER_TIMEOUT"


def connect_timeout() -> float:
    """The seconds :data:`CONNECT_TIMEOUT_ENV` sets, else :data:`CONNECT_TIMEOUT_S`.

    Raises:
        InputError: a value that is not a number of seconds above 0.
    """
    return env_seconds(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT_S, f"the default is {CONNECT_TIMEOUT_S:g} s")


class DaskCluster:
    """A client of the Dask scheduler at ``address`` (``tcp://host:8786``)."""

    def __init__(self, address: str, *, timeout_s: float | None = None, host_timeout_s: float = 600.0) -> None:
        """``timeout_s``: how long the scheduler has to answer (default :func:`connect_timeout`)."""
        timeout_s = connect_timeout() if timeout_s is None else timeout_s
        distributed = _distributed()
        self.address = address
        self.host_timeout_s = host_timeout_s
        """How long one host's task may go unanswered before it counts as lost (``--host-timeout``)."""
        self._paths: list[str] = []
        self._futures: set[Any] = set()
        self._killed = distributed.KilledWorker
        # Dask logs a lost worker or scheduler with its traceback on stderr; the command says it in one line.
        for name in ["distributed", "tornado", "asyncio", *logging.root.manager.loggerDict]:
            if name.split(".")[0] in ("distributed", "tornado", "asyncio"):
                logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        self.client = _connect(distributed, address, timeout_s)

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
        except (OSError, CancelledError) as exc:  # CommClosedError is an OSError: the scheduler went away
            raise InputError(f"the Dask scheduler at {self.address} stopped answering while the hosts were read "
                             f"({type(exc).__name__})", _HINT) from None
        except BaseException:
            # A command that stops early (a host it cannot use) leaves nothing running on the cluster
            # (when there is still a scheduler to tell).
            if self.client.status == "running":
                with contextlib.suppress(Exception):
                    self.client.cancel(list(self._futures))
            raise

    def close(self) -> None:
        """Disconnect from the scheduler (a scheduler that went away is not waited for)."""
        with contextlib.suppress(Exception):
            self.client.close(timeout=5)

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
            since[future] = time.monotonic()
            self._futures.add(future)
            queue.add(future)

        since: dict[Any, float] = {}  # when each task in flight was submitted
        for _ in range(limit):
            submit_next()
        while index:
            # The next result, or none in time: a task unanswered for --host-timeout is lost (its worker
            # stopped, or none is left to run it), and named.
            future = _next_within(queue, min(since.values()) + self.host_timeout_s)
            if future is None:
                oldest = min(since, key=since.__getitem__)
                i, data = index.pop(oldest)
                since.pop(oldest)
                self.client.cancel([oldest])
                self._futures.discard(oldest)
                if data is not None:
                    data.release()
                submit_next()
                yield i, self._lost(i, "")
                continue
            i, data = index.pop(future)
            submitted = since.pop(future, time.monotonic())
            try:
                # Finished is not fetched: a worker that dies before handing the result over has it
                # rescheduled, maybe on no worker at all, so the fetch has the task's deadline too.
                result = future.result(timeout=max(submitted + self.host_timeout_s - time.monotonic(), 1.0))
            except self._killed as exc:
                result = HostFailure(self._paths[i], f"the workers reading it died ({exc})", kind="died")
            except TimeoutError:
                result = self._lost(i, "its result never came back")
            except CancelledError as exc:
                if "scheduler" in str(exc):
                    raise InputError(f"the Dask scheduler at {self.address} went away while {self._paths[i]} "
                                     "was read", _HINT) from None
                result = HostFailure(self._paths[i], "its task was cancelled on the cluster", kind="died")
            finally:
                self._futures.discard(future)
                future.release()
                if data is not None:
                    data.release()
            submit_next()
            yield i, result


    def _lost(self, i: int, what: str) -> HostFailure:
        """Host ``i``'s task, unanswered for ``--host-timeout``, named with the workers left."""
        if self.client.status != "running":
            raise InputError(f"the Dask scheduler at {self.address} went away while {self._paths[i]} was read",
                             _HINT)
        workers = len(self.client.scheduler_info().get("workers", {}))
        why = ("the cluster has no worker left" if not workers else
               f"{workers} worker(s) connected; one stopped or hung")
        return HostFailure(self._paths[i], f"no worker answered within {self.host_timeout_s:g} s "
                                           f"({why}{'; ' + what if what else ''}; a larger file may need a longer "
                                           "--host-timeout)", kind="died")


def _next_within(queue: Any, deadline: float) -> Any:
    """The next finished future of ``queue`` (Dask's ``as_completed``), or None at ``deadline``
    (``time.monotonic``)."""
    while not queue.has_ready():
        if time.monotonic() >= deadline:
            return None
        time.sleep(_POLL_S)
    return next(queue)


def read_shipped(task: HostTask, data: bytes) -> HostPart | HostFailure:
    """:func:`read_one` of a task whose file's bytes were shipped to the worker."""
    return read_one(dataclasses.replace(task, data=data))


def _file_bytes(task: HostTask) -> bytes:
    """The task's file as this machine sees it (its path as the command was given it)."""
    return read_regular_bytes(task.path)  # a FIFO planted as a host file would block forever
