"""A pod-size capture through the command users run: ``hlo-doctor stats LOGDIR --format json``.

One log directory of ``--hosts`` TPU host files of ``--size-mb`` each (a trace generated as
``benchmarks/bench_device_trace.py`` does, copied under each host's name), read:

- ``--jobs 1`` (each host in the command's process, one after another), ``--jobs 2`` (two worker
  processes), and on a Dask cluster of two local workers (``dask scheduler`` + two ``dask worker``
  processes of one thread each, started here);
- wall time, and the peak RSS (``VmHWM``) of every process involved: the command's own, and the
  largest of its workers' (sampled from /proc every 50 ms, and as the workers exit);
- xprof 2.24's ``hlo_stats`` on one host file beside it (its own process);
- how the time grows from 1 to ``--hosts`` hosts (``--jobs 2``).

``--rss FILE...`` measures instead the peak RSS of ``stats FILE --format json`` on single host files
(TPU, GPU, XLA:CPU): the command's process, and the worker's when the file is one host of two
(``--jobs 2``). ``--source DIR`` runs another source tree of hlo-doctor (the one before a change,
from ``git archive``) with the same interpreter. ``--replicate FILE N OUT`` writes a trace N times
as long (every line's events repeated, shifted by the trace's span): a large GPU trace from a
real capture.

Usage::

    python benchmarks/bench_pod.py [--workdir DIR] [--hosts 8] [--size-mb 100] [--cores 4]
    python benchmarks/bench_pod.py --rss FILE [FILE...] [--source DIR]
    python benchmarks/bench_pod.py --replicate sample_traces/gpu_h200_original/plugins/profile/*/vm.xplane.pb 50 gpu.xplane.pb

Traces are generated into ``--workdir`` (default: a temporary directory) and never committed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
RUN = "2026_01_01_00_00_00"


def _hwm(pid: int) -> float:
    """Peak RSS of a process (MiB); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


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
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in {self.command} | _children(self.roots | {self.command}):
                self.peaks[pid] = max(self.peaks.get(pid, 0.0), _hwm(pid))
            time.sleep(0.05)

    def stop(self) -> dict[str, float]:
        """(command's peak, the largest other process's peak), MiB."""
        self._stop.set()
        self._thread.join()
        others = [v for p, v in self.peaks.items() if p != self.command and p not in self.roots]
        return {"command_peak_mib": self.peaks.get(self.command, 0.0), "worker_peak_mib": max(others, default=0.0),
                "workers": len(others)}


def _env(source: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source), env.get("PYTHONPATH", "")) if p)
    return env


def run_stats(args: list[str], *, roots: frozenset[int] = frozenset(), source: Path | None = None) -> dict[str, Any]:
    """``hlo-doctor stats ARGS`` in its own process: wall time and peak RSS of it and its workers."""
    with tempfile.TemporaryFile("w+") as log:
        t0 = time.perf_counter()
        # Run from elsewhere than the repository: ``-m`` puts the working folder before PYTHONPATH.
        proc = subprocess.Popen([sys.executable, "-m", "hlo_doctor.cli", "stats", *args], env=_env(source),
                                stdout=subprocess.DEVNULL, stderr=log, text=True, cwd=tempfile.gettempdir())
        sampler = Sampler(proc.pid, set(roots))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        peaks = sampler.stop()
        if not peaks["workers"]:
            # (The kernel's figure covers the process's reaped children too: only without workers.)
            peaks["command_peak_mib"] = max(peaks["command_peak_mib"], usage.ru_maxrss / 1024)
        log.seek(0)
        err = log.read()
    code = proc.returncode
    if code != 0:
        raise SystemExit(f"hlo-doctor stats {' '.join(args)} failed ({code}):\n{err[-2000:]}")
    # CPU time of the command and the workers it started (not of a Dask cluster's), and how busy
    # the machine was: the 2 cores are shared with other jobs.
    return {"seconds": seconds, **peaks, "cpu_s": usage.ru_utime + usage.ru_stime, "load": os.getloadavg()[0]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DaskCluster:
    """``dask scheduler`` and ``workers`` ``dask worker`` processes (one thread each) on 127.0.0.1."""

    def __init__(self, workers: int, logs: Path) -> None:
        bin_dir = Path(sys.executable).parent
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        env = _env()
        logs.mkdir(parents=True, exist_ok=True)
        self.procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                                        self.address.rsplit(":", 1)[1], "--dashboard-address", ":0"],
                                       stdout=(logs / "scheduler.log").open("wb"), stderr=subprocess.STDOUT, env=env)]
        time.sleep(2)
        for i in range(workers):
            self.procs.append(subprocess.Popen(
                [str(bin_dir / "dask"), "worker", self.address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
                stdout=(logs / f"worker-{i}.log").open("wb"), stderr=subprocess.STDOUT, env=env))
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
    proc = subprocess.Popen([sys.executable, "-c", code, str(xplane)], env=_env(), stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = json.loads((proc.stdout.read() if proc.stdout else "{}").strip().splitlines()[-1])
    return {"seconds": out["seconds"], "process_seconds": time.perf_counter() - t0,
            "command_peak_mib": usage.ru_maxrss / 1024}


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


def _pod(work: Path, hosts: int, size_mb: float, cores: int) -> Path:
    """The log directory: one generated TPU trace copied under each host's name."""
    first = work / "trace" / "tpu-host.xplane.pb"
    if not first.exists():
        subprocess.run([sys.executable, str(HERE.parent / "bench_device_trace.py"), "--generate", str(first),
                        str(size_mb), str(cores)], env=_env(), check=True, stdout=subprocess.DEVNULL)
    pod = work / f"pod{hosts}" / "plugins" / "profile" / RUN
    pod.mkdir(parents=True, exist_ok=True)
    for h in range(hosts):
        target = pod / f"tpu-host-{h}.xplane.pb"
        if not target.exists():
            shutil.copy(first, target)
    return pod.parents[2]


def _subset(work: Path, full: Path, hosts: int) -> Path:
    """A log directory of the first ``hosts`` host files (links to the full pod's files)."""
    run = work / f"pod{hosts}-of" / "plugins" / "profile" / RUN
    run.mkdir(parents=True, exist_ok=True)
    for h in range(hosts):
        link = run / f"tpu-host-{h}.xplane.pb"
        if not link.exists():
            link.symlink_to(full / "plugins" / "profile" / RUN / f"tpu-host-{h}.xplane.pb")
    return run.parents[2]


def pod_benchmark(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    pod = _pod(work, args.hosts, args.size_mb, args.cores)
    files = sorted(pod.glob("plugins/profile/*/*.xplane.pb"))
    size = files[0].stat().st_size / 2**20
    print(f"{len(files)} host files of {size:.1f} MiB in {pod}", flush=True)
    results: dict[str, Any] = {"host_file_mib": size, "hosts": len(files), "modes": {}, "growth": {}}
    outs = {label: work / f"out-{k}.json" for k, label in enumerate(("--jobs 1", "--jobs 2", "2 Dask workers"))}
    cluster = DaskCluster(2, work / "dask")
    modes: dict[str, list[str]] = {"--jobs 1": ["--jobs", "1"], "--jobs 2": ["--jobs", "2"],
                                   "2 Dask workers": ["--scheduler", cluster.address]}
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in modes}
    try:
        # Rounds that take the modes in turn: the machine's other jobs come and go, each mode sees them alike.
        for _ in range(args.repeat):
            for label, extra in modes.items():
                roots = frozenset(cluster.worker_roots) if "Dask" in label else frozenset()
                runs[label].append(run_stats([str(pod), "--format", "json", "-o", str(outs[label]), *extra], roots=roots))
                print(label, runs[label][-1], flush=True)
    finally:
        cluster.close()
    for label, rs in runs.items():
        best = min(rs, key=lambda r: r["seconds"])
        results["modes"][label] = {**best, "walls": [r["seconds"] for r in rs],
                                   "command_peak_mib": max(r["command_peak_mib"] for r in rs),
                                   "worker_peak_mib": max(r["worker_peak_mib"] for r in rs)}
    docs = [json.loads(p.read_text()) for p in outs.values()]
    results["same_rows"] = all(d["rows"] == docs[0]["rows"] for d in docs)
    results["json_mib"] = outs["--jobs 1"].stat().st_size / 2**20
    if not args.skip_xprof:
        results["xprof_hlo_stats_one_host"] = xprof_hlo_stats(files[0])
        print("xprof", results["xprof_hlo_stats_one_host"], flush=True)
    n = 1
    while n <= len(files):
        sub = _subset(work, pod, n) if n < len(files) else pod
        results["growth"][n] = run_stats([str(sub), "--format", "json", "-o", str(work / "growth.json"),
                                          "--jobs", "2"])
        print("growth", n, results["growth"][n], flush=True)
        n *= 2
    return results


def print_pod(results: dict[str, Any]) -> None:
    size, hosts = results["host_file_mib"], results["hosts"]
    print(f"\n{hosts} hosts x {size:.1f} MiB TPU host files; JSON export {results['json_mib']:.2f} MiB; "
          f"the same rows in every mode: {results['same_rows']}")
    print("| mode | wall s (fastest; every round) | s per host | CPU s (command + its workers) | load avg (1 min) | "
          "command peak RSS MiB (x host file) | largest worker peak RSS MiB (x host file) |")
    print("|---|---|---|---|---|---|---|")
    for label, r in results["modes"].items():
        walls = ", ".join(f"{w:.1f}" for w in r["walls"])
        print(f"| {label} | {r['seconds']:.1f} ({walls}) | {r['seconds'] / hosts:.1f} | {r['cpu_s']:.1f} | {r['load']:.1f} | "
              f"{_cell(r['command_peak_mib'], size)} | {_cell(r['worker_peak_mib'], size)} |")
    x = results.get("xprof_hlo_stats_one_host")
    if x:
        print(f"| xprof hlo_stats, one host file | {x['seconds']:.1f} (process {x['process_seconds']:.1f}) | "
              f"{x['seconds']:.1f} | | | {_cell(x['command_peak_mib'], size)} | |")
    print("\n| hosts (--jobs 2) | wall s | s per host | CPU s | load avg | command peak RSS MiB | largest worker peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for n, r in results["growth"].items():
        print(f"| {n} | {r['seconds']:.1f} | {r['seconds'] / int(n):.1f} | {r['cpu_s']:.1f} | {r['load']:.1f} | "
              f"{r['command_peak_mib']:.0f} | {r['worker_peak_mib']:.0f} |")


def _cell(mib: float, file_mib: float) -> str:
    return f"{mib:.0f} ({mib / file_mib:.1f}x)" if mib else "-"


def rss_benchmark(files: list[Path], source: Path | None, work: Path) -> list[dict[str, Any]]:
    """Peak RSS of ``stats FILE --format json`` per host file: alone, and as one host of two."""
    rows = []
    for i, f in enumerate(files):
        size = f.stat().st_size / 2**20
        alone = run_stats([str(f), "--format", "json", "-o", str(work / "rss.json")], source=source)
        pod = work / "rss-pod" / f"{i}-{f.stem}" / "plugins" / "profile" / RUN
        pod.mkdir(parents=True, exist_ok=True)
        for h in range(2):
            link = pod / f"host-{h}.xplane.pb"
            if not link.exists():
                link.symlink_to(f.resolve())
        two = run_stats([str(pod.parents[2]), "--format", "json", "-o", str(work / "rss.json"), "--jobs", "2"],
                        source=source) if source is None else None
        rows.append({"file": str(f), "mib": size, "alone": alone, "as_one_of_two": two})
        print(json.dumps(rows[-1]), flush=True)
    print("\n| host file | MiB | stats FILE --format json: s | its process's peak RSS MiB (x file) | its worker's "
          "(x file) | one host of two (--jobs 2): worker's peak RSS MiB (x file) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        alone, two, mib = r["alone"], r["as_one_of_two"], r["mib"]
        print(f"| {Path(r['file']).name} | {mib:.1f} | {alone['seconds']:.1f} | {_cell(alone['command_peak_mib'], mib)} | "
              f"{_cell(alone['worker_peak_mib'], mib)} | {_cell(two['worker_peak_mib'], mib) if two else '-'} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--size-mb", type=float, default=100.0)
    parser.add_argument("--cores", type=int, default=4)
    parser.add_argument("--skip-xprof", action="store_true")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of the three modes (the fastest is kept)")
    parser.add_argument("--rss", nargs="+", type=Path, metavar="FILE")
    parser.add_argument("--source", type=Path, default=None, help="hlo-doctor source tree to run (--rss)")
    parser.add_argument("--replicate", nargs=3, metavar=("XPLANE", "COPIES", "OUT"))
    args = parser.parse_args()
    if args.replicate:
        xplane, copies, out = args.replicate
        print(replicate(Path(xplane), int(copies), Path(out)))
        return
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="hlo-doctor-bench-pod-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.rss:
        results: Any = rss_benchmark([f.resolve() for f in args.rss], args.source, work)
        (work / "rss-results.json").write_text(json.dumps(results, indent=1))
        return
    results = pod_benchmark(args, work)
    (work / "results.json").write_text(json.dumps(results, indent=1))
    print_pod(results)
    print(f"\ntraces and results.json in {work}")


if __name__ == "__main__":
    main()
