"""Fixtures of the pod tests: real modules, log directories of several hosts, a real Dask cluster."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jax.numpy as jnp
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))

from pods import cpu_pod, host_dir, large_tpu_host, tpu_pod  # noqa: E402
from xspace_builder import RealModule, compile_module  # noqa: E402

from hlo_doctor.opstats import OpStats, load_opstats  # noqa: E402

BIN = Path(sys.executable).parent


def _pod_layer(x: jnp.ndarray, w: jnp.ndarray) -> jnp.ndarray:
    return jnp.tanh(x @ w) * 0.5 + x


def _pod_sample(logits: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    return jnp.argmax(logits.astype(jnp.float32), axis=-1), logits


@pytest.fixture(scope="session")
def layer() -> RealModule:
    return compile_module(_pod_layer, jnp.ones((8, 64), jnp.float32), jnp.ones((64, 64), jnp.float32))


@pytest.fixture(scope="session")
def sampler() -> RealModule:
    return compile_module(_pod_sample, jnp.ones((8, 512), jnp.bfloat16))


@pytest.fixture(scope="session")
def tpu_logdir(tmp_path_factory: pytest.TempPathFactory, layer: RealModule, sampler: RealModule) -> Path:
    """Three TPU hosts of two chips, each a little different."""
    return tpu_pod(tmp_path_factory.mktemp("tpu-pod"), layer, sampler)


@pytest.fixture(scope="session")
def cpu_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real XLA:CPU captures of the engine as two hosts."""
    return cpu_pod(tmp_path_factory.mktemp("cpu-pod"))


@pytest.fixture(scope="session")
def large_logdir(tmp_path_factory: pytest.TempPathFactory, layer: RealModule, sampler: RealModule) -> Path:
    """Two small TPU hosts and one large one (a worker reads it for a few seconds)."""
    root = tpu_pod(tmp_path_factory.mktemp("large-pod"), layer, sampler, hosts=2)
    large_tpu_host(host_dir(root) / "tpu-host-9.xplane.pb", layer, size_mb=14, chips=1)
    return root


@pytest.fixture(scope="session")
def large_stats(large_logdir: Path) -> OpStats:
    """The large pod read in one process (every file in one go)."""
    return load_opstats(large_logdir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_workers(address: str, count: int, timeout_s: float = 60.0) -> None:
    from distributed import Client

    with Client(address, timeout="20s") as client:
        client.wait_for_workers(count, timeout=timeout_s)


@dataclass(frozen=True)
class Cluster:
    """A Dask cluster the tests started: the scheduler's address and the ``dask worker`` processes."""

    address: str
    workers: tuple[int, ...]


@pytest.fixture(scope="session")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A real ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1 (distributed's own
    CLI); the scheduler retries a task whose worker died once (``allowed-failures`` 1, as
    ``--jobs`` does)."""
    pytest.importorskip("distributed")
    logs = tmp_path_factory.mktemp("dask")
    address = f"tcp://127.0.0.1:{_free_port()}"
    env = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="1",
               DASK_DISTRIBUTED__WORKER__DAEMON="False")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with (logs / "scheduler.log").open("wb") as log:
            procs.append(subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                                           address.rsplit(":", 1)[1], "--dashboard-address", ":0"],
                                          stdout=log, stderr=log, env=env, cwd=logs))
        time.sleep(1.0)
        for i in range(2):
            with (logs / f"worker-{i}.log").open("wb") as log:
                procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--nworkers", "1",
                                               "--nthreads", "1", "--no-dashboard", "--name", f"w{i}"],
                                              stdout=log, stderr=log, env=env, cwd=logs))
        _wait_for_workers(address, 2)
        yield Cluster(address, tuple(p.pid for p in procs[1:]))
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(logs, ignore_errors=True)
