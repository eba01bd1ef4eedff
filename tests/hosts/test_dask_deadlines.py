"""Deadlines on a real Dask cluster whose only worker, or whose scheduler, fails while a host is read.

Each test starts its own ``dask scheduler`` and one ``dask worker --no-nanny`` (distributed's CLI) on
127.0.0.1, starts ``stats --scheduler`` on the large pod and, once the worker has the large host file
open, kills (SIGKILL) or stops (SIGSTOP) the worker or kills the scheduler. The command ends with exit
2 and one line within ``--host-timeout`` plus a margin: a host file named, with "the cluster has no
worker left" or the workers still connected; or the scheduler named as gone. Never a hang, a traceback (exit 3) or a signal.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import BIN, _free_port, _wait_for_workers
from procs import readers

LARGE_HOST = "tpu-host-9.xplane.pb"
HOST_TIMEOUT_S = 8


@dataclass(frozen=True)
class OneWorker:
    address: str
    scheduler: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]


@pytest.fixture
def one_worker(tmp_path: Path) -> Iterator[OneWorker]:
    """A scheduler and a single worker without a nanny (a killed worker is not started again)."""
    pytest.importorskip("distributed")
    logs = tmp_path / "dask"
    logs.mkdir()
    address = f"tcp://127.0.0.1:{_free_port()}"
    env = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="1")
    with (logs / "scheduler.log").open("wb") as log:
        scheduler = subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                                      address.rsplit(":", 1)[1], "--dashboard-address", ":0"],
                                     stdout=log, stderr=log, env=env, cwd=logs)
    time.sleep(1.0)
    with (logs / "worker.log").open("wb") as log:
        worker = subprocess.Popen([str(BIN / "dask"), "worker", address, "--no-nanny", "--nthreads", "1",
                                   "--no-dashboard", "--name", "only"], stdout=log, stderr=log, env=env, cwd=logs)
    try:
        _wait_for_workers(address, 1)
        yield OneWorker(address, scheduler, worker)
    finally:
        for p in (worker, scheduler):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait(timeout=30)
        shutil.rmtree(logs, ignore_errors=True)


def _run_and_hurt(large_logdir: Path, cluster: OneWorker, victim: str, sig: int) -> tuple[int, str, float]:
    host = next(large_logdir.glob(f"plugins/profile/*/{LARGE_HOST}"))
    proc = subprocess.Popen([sys.executable, "-m", "hlo_doctor.cli", "stats", str(large_logdir), "--scheduler",
                             cluster.address, "--host-timeout", str(HOST_TIMEOUT_S), "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not readers(host, [cluster.worker.pid]):  # until the worker reads it
            assert time.monotonic() < deadline and proc.poll() is None, "the worker never opened the host file"
            time.sleep(0.01)
        hurt = time.monotonic()
        os.kill((cluster.worker if victim == "worker" else cluster.scheduler).pid, sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, time.monotonic() - hurt


def _one_line(code: int, err: str, *words: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err[-2000:])
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_the_only_worker_killed_mid_read(large_logdir: Path, one_worker: OneWorker) -> None:
    code, err, seconds = _run_and_hurt(large_logdir, one_worker, "worker", signal.SIGKILL)
    _one_line(code, err, ".xplane.pb", f"no worker answered within {HOST_TIMEOUT_S} s", "the cluster has no worker left")
    assert seconds < HOST_TIMEOUT_S + 30, seconds


def test_the_only_worker_stopped_mid_read(large_logdir: Path, one_worker: OneWorker) -> None:
    code, err, seconds = _run_and_hurt(large_logdir, one_worker, "worker", signal.SIGSTOP)
    _one_line(code, err, ".xplane.pb", f"no worker answered within {HOST_TIMEOUT_S} s", "1 worker(s) connected")
    assert seconds < HOST_TIMEOUT_S + 30, seconds


def test_the_scheduler_killed_mid_read(large_logdir: Path, one_worker: OneWorker) -> None:
    code, err, seconds = _run_and_hurt(large_logdir, one_worker, "scheduler", signal.SIGKILL)
    _one_line(code, err, f"the Dask scheduler at {one_worker.address}")
    assert seconds < HOST_TIMEOUT_S + 30, seconds
