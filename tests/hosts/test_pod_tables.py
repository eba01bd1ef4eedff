"""One table of a pod's host files, however they are read: one process reading every file, ``--jobs 1``,
``--jobs 2`` worker processes, or a real Dask cluster."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import Cluster

from hlo_doctor.cli import main
from hlo_doctor.cli.profile import compile_summary
from hlo_doctor.opstats import load_opstats, to_json


def cli(*args: str, code: int = 0) -> str:
    """Run hlo-doctor in this process; its stdout."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return str(result.stdout)


def stats_doc(path: Path, *options: str) -> dict[str, Any]:
    """``stats PATH --format json --per-step`` (every column, the per-step samples, the breakdown)."""
    return dict(json.loads(cli("stats", str(path), "--format", "json", "--per-step", *options)))


def assert_close(a: Any, b: Any, where: str = "") -> None:
    """Equal documents, floats to 1e-9 (sums added in another order)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), where
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), f"{where}: {a} != {b}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{where}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("logdir", ["tpu_logdir", "cpu_logdir"])
def test_jobs_1_and_jobs_2_equal_reading_every_file_in_one_process(request: pytest.FixtureRequest,
                                                                    logdir: str) -> None:
    path: Path = request.getfixturevalue(logdir)
    # As stats writes it: with the compile counts its header prints.
    stats = load_opstats(path)
    one_process = json.loads(to_json(stats, compact=True, compiles=compile_summary(stats)))
    jobs_1 = stats_doc(path, "--jobs", "1")
    jobs_2 = stats_doc(path, "--jobs", "2")
    assert jobs_2 == jobs_1
    assert_close(jobs_1, one_process)
    # Per host and per device, as read in one go: every chip of every host counts.
    hosts = {s["host"] for s in one_process["breakdown"]["steps"]}
    assert len(hosts) == len(list(path.glob("plugins/profile/*/*.xplane.pb"))) >= 2
    devices = [(w["host"], w["device"]) for w in jobs_2["breakdown"]["windows"]]
    assert devices == [(w["host"], w["device"]) for w in one_process["breakdown"]["windows"]]
    assert jobs_2["num_devices"] == len(devices)


def test_hosts_that_differ_merge_into_the_rows_of_all(tpu_logdir: Path) -> None:
    doc = stats_doc(tpu_logdir, "--jobs", "2")
    rows = {(r["module"], r["program_id"], r["op"]): r for r in doc["rows"]}
    # The sampler recompiled on one host only: both programs are rows, each on that host's chips.
    samplers = {pid: r for (module, pid, _), r in rows.items() if module.startswith("jit__pod_sample")}
    assert len({pid for pid in samplers}) == 2
    # The layer's last op ran on two of the three hosts: 4 of 6 chips.
    assert sorted({r["devices"] for (m, _, _), r in rows.items() if m.startswith("jit__pod_layer")}) == [4, 6]
    assert doc["num_devices"] == 6 and doc["step_source"] == "device-steps"


def test_dask_cluster_gives_the_local_table(dask_cluster: Cluster, tpu_logdir: Path, cpu_logdir: Path) -> None:
    for path in (tpu_logdir, cpu_logdir):
        assert stats_doc(path, "--scheduler", dask_cluster.address) == stats_doc(path, "--jobs", "1")


def test_diagnose_and_gate_read_the_hosts_side_by_side(dask_cluster: Cluster, tpu_logdir: Path) -> None:
    def findings(*options: str) -> list[dict[str, Any]]:
        doc = json.loads(cli("diagnose", str(tpu_logdir), "--format", "json", *options))
        return [{k: f[k] for k in ("code", "module", "op", "time_per_step_us", "recoverable_us")}
                for f in doc["findings"]]

    local = findings("--jobs", "2")
    assert local and local == findings("--jobs", "1") == findings("--scheduler", dask_cluster.address)
    gate = json.loads(cli("gate", str(tpu_logdir), str(tpu_logdir), "--jobs", "2", "--format", "json"))
    assert gate["verdict"] == "pass"


def test_scheduler_from_pyproject(dask_cluster: Cluster, tpu_logdir: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from distributed import Client

    def host_tasks(dask_scheduler: Any) -> int:
        """Task states the scheduler has counted for hlo-doctor's host tasks (keys hlo-doctor-host-...)."""
        prefix = dask_scheduler.task_prefixes.get("hlo-doctor-host")
        return int(sum(prefix.state_counts.values())) if prefix is not None else 0

    (tmp_path / "pyproject.toml").write_text(f'[tool.hlo-doctor]\nscheduler = "{dask_cluster.address}"\n')
    monkeypatch.chdir(tmp_path)
    with Client(dask_cluster.address, timeout="20s") as client:
        before = client.run_on_scheduler(host_tasks)
        cli("stats", str(tpu_logdir), "--top", "1")
        after = client.run_on_scheduler(host_tasks)
    assert after > before  # the host files were read on the cluster the settings name


@pytest.mark.parametrize("jobs", [1, 2])
def test_hosts_read_without_the_breakdown_give_the_same_table(tpu_logdir: Path, jobs: int) -> None:
    """What gate reads (PodOptions(breakdown=False)): the same rows, steps and per-step samples as the
    whole read, and no step breakdown summed."""
    from hlo_doctor.hosts.capture import PodOptions, read_capture

    whole, _ = read_capture(tpu_logdir, PodOptions(jobs=jobs))
    lean, _ = read_capture(tpu_logdir, PodOptions(jobs=jobs, breakdown=False))
    assert whole.breakdown is not None and lean.breakdown is None
    assert lean.table.equals(whole.table) and lean.per_step.equals(whole.per_step)
    assert (lean.step_times_us, lean.num_steps, lean.warnings) == (whole.step_times_us, whole.num_steps, whole.warnings)


@pytest.mark.parametrize("logdir", ["tpu_logdir", "cpu_logdir"])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_json_without_steps_sums_the_slices_as_the_hosts_come_to_the_same_figures(
        request: pytest.FixtureRequest, logdir: str, jobs: str) -> None:
    """``stats --format json`` without ``--per-step`` keeps the breakdown's slices as their sums alone
    (summed as each host arrives: PodOptions(breakdown_steps=False)); its document is the ``--per-step``
    one's, figure for figure to the bit, less the per-step parts, and the table's views are unchanged."""
    from hlo_doctor.hosts.capture import PodOptions, read_capture

    path: Path = request.getfixturevalue(logdir)
    full = stats_doc(path, "--jobs", jobs)
    lean = json.loads(cli("stats", str(path), "--format", "json", "--jobs", jobs))
    for key in ("per_step", "per_step_written", "step_times_us"):  # (what --per-step adds)
        full.pop(key, None)
        lean.pop(key, None)
    del full["breakdown"]["steps"]
    assert lean == full
    stats, _ = read_capture(path, PodOptions(jobs=int(jobs), breakdown_steps=False))
    assert stats.breakdown is not None and stats.breakdown.sums is not None and len(stats.breakdown.steps) == 0
    assert stats.breakdown.slice_count == sum(d["steps"] for d in full["breakdown"]["summary"]["devices"]) > 0
    with pytest.raises(ValueError, match="sums"):
        stats.breakdown.to_dict(steps=True)
