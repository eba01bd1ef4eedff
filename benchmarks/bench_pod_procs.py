"""The processes of :mod:`bench_pod`'s measures: a command run under a sampler of its processes' peak
RSS and CPU seconds, a Dask cluster of local workers, xprof's hlo_stats in its own process, and a
trace made longer (``--replicate``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _hwm(pid: int) -> float:
    """Peak RSS of a process (MiB); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(roots: set[int]) -> set[int]:
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


class Sampler:
    """Peak RSS of a command's process and of every process below ``roots`` while it runs."""

    def __init__(self, command_pid: int, roots: set[int]) -> None:
        self.command, self.roots = command_pid, roots
        self.peaks: dict[int, float] = {}
        self.cpu: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in {self.command} | _children(self.roots | {self.command}):
                self.peaks[pid] = max(self.peaks.get(pid, 0.0), _hwm(pid))
                self.cpu[pid] = max(self.cpu.get(pid, 0.0), _cpu(pid))
                if "hlo_doctor.hosts.worker" not in self.names.get(pid, ""):
                    # Read again until the exec: a child starts as a copy of its parent.
                    self.names[pid] = _cmdline(pid) or self.names.get(pid, "")
            time.sleep(0.05)

    def stop(self) -> dict[str, Any]:
        """The command's peak RSS (MiB) and CPU seconds, the largest other process's peak, and the
        CPU seconds of each other process (sampled: up to 50 ms short of a process's last)."""
        self._stop.set()
        self._thread.join()
        # Workers: hlo-doctor's own, or what runs under a Dask worker; not a short-lived helper the
        # command forks (a fork starts with its parent's pages: its peak is the command's).
        others = [p for p in self.peaks if p != self.command and p not in self.roots
                  and (self.roots or "hlo_doctor.hosts.worker" in self.names.get(p, ""))]
        return {"command_peak_mib": self.peaks.get(self.command, 0.0),
                "worker_peak_mib": max((self.peaks[p] for p in others), default=0.0), "workers": len(others),
                "command_cpu_s": self.cpu.get(self.command, 0.0),
                "worker_cpu_s": sorted((round(self.cpu.get(p, 0.0), 1) for p in others), reverse=True)}


def env(source: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a measured process (``source``: another hlo-doctor tree first on its path)."""
    out = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", **extra)
    if source is not None:
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(source), out.get("PYTHONPATH", "")) if p)
    return out


def run_stats(args: list[str], *, roots: frozenset[int] = frozenset(), source: Path | None = None,
              extra_env: dict[str, str] | None = None, command: str = "stats", ok: tuple[int, ...] = (0,)
              ) -> dict[str, Any]:
    """``hlo-doctor COMMAND ARGS`` (``stats`` by default) in its own process: wall time and peak RSS of
    it and its workers. ``ok``: the exit codes that are not a failure (``diagnose`` exits 1 on a finding
    at ``--fail-on``, ``gate`` on a regression)."""
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as log:
        t0 = time.perf_counter()
        # Run from elsewhere than the repository: ``-m`` puts the working folder before PYTHONPATH.
        proc = subprocess.Popen([sys.executable, "-m", "hlo_doctor.cli", command, *args],
                                env=env(source, **(extra_env or {})),
                                stdout=subprocess.DEVNULL, stderr=log, text=True, cwd=tempfile.gettempdir())
        sampler = Sampler(proc.pid, set(roots))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        peaks = sampler.stop()
        if not peaks["workers"]:
            # (The kernel's figures cover the process's reaped children too: only without workers.)
            peaks["command_peak_mib"] = max(peaks["command_peak_mib"], usage.ru_maxrss / 1024)
            peaks["command_cpu_s"] = usage.ru_utime + usage.ru_stime
        log.seek(0)
        err = log.read()
    code = proc.returncode
    if code not in ok:
        raise SystemExit(f"hlo-doctor {command} {' '.join(args)} failed ({code}):\n{err[-2000:]}")
    # CPU time of the command and the workers it started (not of a Dask cluster's), and how busy
    # the machine was: the 2 cores are shared with other jobs.
    return {"seconds": seconds, **peaks, "cpu_s": usage.ru_utime + usage.ru_stime,
            "load": max(load_before, os.getloadavg()[0])}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DaskCluster:
    """``dask scheduler`` and ``workers`` ``dask worker`` processes (one thread each) on 127.0.0.1."""

    def __init__(self, workers: int, logs: Path) -> None:
        bin_dir = Path(sys.executable).parent
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        environ = env()
        logs.mkdir(parents=True, exist_ok=True)
        self.procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                                        self.address.rsplit(":", 1)[1], "--dashboard-address", ":0"],
                                       stdout=(logs / "scheduler.log").open("wb"), stderr=subprocess.STDOUT, env=environ)]
        time.sleep(2)
        for i in range(workers):
            self.procs.append(subprocess.Popen(
                [str(bin_dir / "dask"), "worker", self.address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
                stdout=(logs / f"worker-{i}.log").open("wb"), stderr=subprocess.STDOUT, env=environ))
        from distributed import Client

        with Client(self.address, timeout="30s") as client:
            client.wait_for_workers(workers, timeout=120)

    @property
    def worker_roots(self) -> set[int]:
        return {p.pid for p in self.procs[1:]}

    def close(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def xprof_hlo_stats(xplane: Path) -> dict[str, Any]:
    """xprof's hlo_stats on one host file, in its own process (a copy: xprof writes beside its input)."""
    code = (
        "import json, shutil, sys, tempfile, time\n"
        "from pathlib import Path\n"
        "from xprof.convert import raw_to_tool_data\n"
        "with tempfile.TemporaryDirectory() as tmp:\n"
        "    copy = Path(tmp) / Path(sys.argv[1]).name\n"
        "    shutil.copy(sys.argv[1], copy)\n"
        "    t0 = time.perf_counter()\n"
        "    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], 'hlo_stats', {})\n"
        "    print(json.dumps({'seconds': time.perf_counter() - t0}))\n")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, str(xplane)], env=env(), stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = json.loads((proc.stdout.read() if proc.stdout else "{}").strip().splitlines()[-1])
    return {"seconds": out["seconds"], "process_seconds": time.perf_counter() - t0,
            "command_peak_mib": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}


def replicate(xplane: Path, copies: int, out: Path) -> Path:
    """Write ``xplane`` ``copies`` times as long: every line's events repeated, shifted by the span of
    the whole trace (device and host lines alike, so steps and ops stay together)."""
    from hlo_doctor.trace import xplane_pb2 as xp

    space = xp.XSpace.FromString(xplane.read_bytes())
    lo, hi = None, None
    for plane in space.planes:
        for line in plane.lines:
            for ev in line.events:
                if ev.num_occurrences:
                    continue
                start = line.timestamp_ns * 1000 + ev.offset_ps
                lo = start if lo is None else min(lo, start)
                hi = start + ev.duration_ps if hi is None else max(hi, start + ev.duration_ps)
    span = (hi or 0) - (lo or 0) + 1_000_000
    for plane in space.planes:
        for line in plane.lines:
            events = [ev for ev in line.events if not ev.num_occurrences]
            for k in range(1, copies):
                for ev in events:
                    copy = line.events.add()
                    copy.CopyFrom(ev)
                    copy.offset_ps = ev.offset_ps + k * span
    out.write_bytes(space.SerializeToString())
    return out
