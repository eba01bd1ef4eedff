"""What a pod read does when a worker dies under it, a host file is corrupt, or Dask is missing: a
retry, a named file and exit 2, or a table that says which hosts it leaves out; never a partial
table presented as whole."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster
from procs import kill_reader
from test_pod_tables import assert_close, stats_doc

from hlo_doctor.cli.profile import compile_summary
from hlo_doctor.opstats import OpStats, to_json

LARGE_HOST = "tpu-host-9.xplane.pb"


def _start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """hlo-doctor in its own process (its workers are its children)."""
    return subprocess.Popen([sys.executable, "-m", "hlo_doctor.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def large_table(large_stats: OpStats) -> dict[str, Any]:
    """The large pod's export, every file read in one process."""
    return dict(json.loads(to_json(large_stats, per_step=True, compact=True, compiles=compile_summary(large_stats))))


def test_worker_killed_mid_read_is_retried(large_logdir: Path, large_table: dict[str, Any]) -> None:
    proc = _start("stats", str(large_logdir), "--jobs", "2", "--format", "json", "--per-step")
    kill_reader(next(large_logdir.glob(f"plugins/profile/*/{LARGE_HOST}")), [proc.pid])
    code, out, err = _finish(proc)
    assert code == 0, err
    assert_close(json.loads(out), large_table)


def test_worker_killed_twice_on_one_host_names_it(large_logdir: Path) -> None:
    host = next(large_logdir.glob(f"plugins/profile/*/{LARGE_HOST}"))
    proc = _start("stats", str(large_logdir), "--jobs", "2", "--format", "json")
    first = kill_reader(host, [proc.pid])
    kill_reader(host, [proc.pid], not_pids=[first])
    code, out, err = _finish(proc)
    assert code == 2 and not out
    # One error line (the capture line is printed only once the capture was read).
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert f"{host}: the worker reading it died twice (killed by signal 9)" in err


def test_worker_stopped_mid_read_is_replaced_at_the_host_timeout(large_logdir: Path,
                                                                 large_table: dict[str, Any]) -> None:
    # A worker frozen (SIGSTOP) while it reads a host never answers: at --host-timeout it is killed
    # and the host read again by another, and the table is whole.
    proc = _start("stats", str(large_logdir), "--jobs", "2", "--format", "json", "--per-step",
                  "--host-timeout", "12")
    started = time.monotonic()
    stopped = kill_reader(next(large_logdir.glob(f"plugins/profile/*/{LARGE_HOST}")), [proc.pid], sig=signal.SIGSTOP)
    code, out, err = _finish(proc)
    assert code == 0, err
    assert 12 <= time.monotonic() - started < 200
    assert_close(json.loads(out), large_table)
    with pytest.raises(ProcessLookupError):
        os.kill(stopped, 0)  # killed, not left frozen behind


def test_dask_worker_killed_mid_read_is_retried(dask_cluster: Cluster, large_logdir: Path,
                                                large_table: dict[str, Any]) -> None:
    proc = _start("stats", str(large_logdir), "--scheduler", dask_cluster.address, "--format", "json", "--per-step")
    kill_reader(next(large_logdir.glob(f"plugins/profile/*/{LARGE_HOST}")), dask_cluster.workers)
    code, out, err = _finish(proc)
    assert code == 0, err
    assert_close(json.loads(out), large_table)


@pytest.fixture
def corrupt_logdir(tpu_logdir: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The TPU pod with one host file cut short; and the pod without that host."""
    bad, good = tmp_path / "bad", tmp_path / "good"
    shutil.copytree(tpu_logdir, bad)
    shutil.copytree(tpu_logdir, good)
    victim = next(bad.glob("plugins/profile/*/tpu-host-1.xplane.pb"))
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) * 2 // 3])
    next(good.glob("plugins/profile/*/tpu-host-1.xplane.pb")).unlink()
    return bad, good, victim


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_corrupt_host_is_named_with_exit_2(corrupt_logdir: tuple[Path, Path, Path], jobs: str) -> None:
    bad, _, victim = corrupt_logdir
    result = cli_result("stats", str(bad), "--jobs", jobs, "--format", "json")
    assert result[0] == 2 and not result[1]
    assert f"error: {victim}: not a readable xplane (truncated or corrupt" in result[2]
    assert "--skip-bad-hosts" in result[2]


def test_skip_bad_hosts_leaves_it_out_and_says_so(corrupt_logdir: tuple[Path, Path, Path]) -> None:
    bad, good, victim = corrupt_logdir
    doc = stats_doc(bad, "--jobs", "2", "--skip-bad-hosts")
    without = stats_doc(good, "--jobs", "2")
    assert [h["path"] for h in doc["hosts_left_out"]] == [str(victim)]
    assert doc["warnings"][0].startswith("1 of 3 host files left out (--skip-bad-hosts): this table holds the other 2")
    assert doc["rows"] == without["rows"] and doc["per_step"] == without["per_step"]
    # The people's table says it in its header line.
    code, _, err = cli_result("stats", str(bad), "--jobs", "2", "--skip-bad-hosts", "--top", "1")
    header = next(line for line in err.splitlines() if line.startswith("tpu (TPU v5 lite)"))
    assert code == 0 and header.endswith("1 host file(s) LEFT OUT (see the notes)")


def test_scheduler_without_distributed_names_the_extra(tpu_logdir: Path, tmp_path: Path) -> None:
    # A 'distributed' that cannot be imported shadows the installed one.
    (tmp_path / "distributed.py").write_text("raise ImportError('distributed is not installed here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    code, out, err = _finish(_start("stats", str(tpu_logdir), "--scheduler", "tcp://127.0.0.1:8786", env=env))
    assert code == 2 and not out
    assert err.strip().splitlines() == [
        "error: --scheduler needs the 'distributed' package, which is not installed - pip install "
        "'hlo-doctor[distributed]' (or drop --scheduler to read on this machine)"]


def cli_result(*args: str) -> tuple[int, str, str]:
    """hlo-doctor in this process: exit code, stdout, stderr."""
    from click.testing import CliRunner

    from hlo_doctor.cli import main

    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr

