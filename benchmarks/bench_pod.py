"""A pod-size capture through the command users run: ``hlo-doctor stats LOGDIR --format json``.

One log directory of ``--hosts`` TPU host files of ``--size-mb`` each (a trace generated as
``benchmarks/bench_device_trace.py`` does, copied under each host's name), read:

- ``--jobs 1`` (each host in the command's process, one after another), ``--jobs 2`` (two worker
  processes), and on a Dask cluster of two local workers (``dask scheduler`` + two ``dask worker``
  processes of one thread each, started here);
- wall time, and the peak RSS (``VmHWM``) and CPU seconds of every process involved: the command's
  own, and each of its workers' (sampled from /proc every 50 ms), with the load average (the
  machine's other jobs: a loaded machine cannot show two hosts at once in the wall time, the CPU
  seconds per process show whether the work was split);
- xprof 2.24's ``hlo_stats`` on one host file beside it (its own process);
- how the time grows from 1 to ``--hosts`` hosts (``--jobs 2``).

``--curve FILE`` measures how the command's peak RSS grows with the hosts (1 to 16 links to one
host file, or to ``--curve-hosts N``; ``--jobs 2``; ``--command diagnose`` or ``gate`` runs that command
instead). ``--rss FILE...`` measures instead the peak RSS of ``stats FILE --format
json`` on single host files (TPU, GPU, XLA:CPU): the command's process, and the worker's when the
file is one host of two (``--jobs 2``). ``--source DIR`` runs another source tree of hlo-doctor (the
one before a change, from ``git archive``) with the same interpreter, in every mode. ``--skip-dask``,
``--skip-growth`` and ``--skip-xprof`` leave those parts out (small settings on a shared machine).
``--replicate FILE N OUT`` writes a trace N times as long (every line's events repeated, shifted by
the trace's span): a large GPU trace from a real capture.

Usage::

    python benchmarks/bench_pod.py [--workdir DIR] [--hosts 8] [--size-mb 100] [--cores 4]
    python benchmarks/bench_pod.py --rss FILE [FILE...] [--source DIR]
    python benchmarks/bench_pod.py --curve FILE [--curve-hosts 64] [--source DIR] [--jobs 2] [--command diagnose]
    python benchmarks/bench_pod.py --replicate sample_traces/gpu_h200_original/plugins/profile/*/vm.xplane.pb 50 gpu.xplane.pb

Traces are generated into ``--workdir`` (default: a temporary directory) and never committed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pod_procs import DaskCluster, env, replicate, run_stats, xprof_hlo_stats  # noqa: E402

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
RUN = "2026_01_01_00_00_00"


def _pod(work: Path, hosts: int, size_mb: float, cores: int) -> Path:
    """The log directory: one generated TPU trace copied under each host's name."""
    first = work / "trace" / "tpu-host.xplane.pb"
    if not first.exists():
        subprocess.run([sys.executable, str(HERE.parent / "bench_device_trace.py"), "--generate", str(first),
                        str(size_mb), str(cores)], env=env(), check=True, stdout=subprocess.DEVNULL)
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
    cluster = None if args.skip_dask else DaskCluster(2, work / "dask")
    modes: dict[str, list[str]] = {"--jobs 1": ["--jobs", "1"], "--jobs 2": ["--jobs", "2"]}
    if cluster is not None:
        modes["2 Dask workers"] = ["--scheduler", cluster.address]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in modes}
    try:
        # Rounds that take the modes in turn: the machine's other jobs come and go, each mode sees them alike.
        for _ in range(args.repeat):
            for label, extra in modes.items():
                roots = frozenset(cluster.worker_roots) if cluster is not None and "Dask" in label else frozenset()
                runs[label].append(run_stats([str(pod), "--format", "json", "-o", str(outs[label]), *extra], roots=roots,
                                             source=args.source))
                print(label, runs[label][-1], flush=True)
    finally:
        if cluster is not None:
            cluster.close()
    for label, rs in runs.items():
        best = min(rs, key=lambda r: r["seconds"])
        results["modes"][label] = {**best, "walls": [r["seconds"] for r in rs],
                                   "command_peak_mib": max(r["command_peak_mib"] for r in rs),
                                   "worker_peak_mib": max(r["worker_peak_mib"] for r in rs)}
    docs = [json.loads(outs[label].read_text()) for label in modes]
    results["same_rows"] = all(d["rows"] == docs[0]["rows"] for d in docs)
    results["json_mib"] = outs["--jobs 1"].stat().st_size / 2**20
    if not args.skip_xprof:
        results["xprof_hlo_stats_one_host"] = xprof_hlo_stats(files[0])
        print("xprof", results["xprof_hlo_stats_one_host"], flush=True)
    n = 1
    while n <= len(files) and not args.skip_growth:
        sub = _subset(work, pod, n) if n < len(files) else pod
        results["growth"][n] = run_stats([str(sub), "--format", "json", "-o", str(work / "growth.json"),
                                          "--jobs", "2"], source=args.source)
        print("growth", n, results["growth"][n], flush=True)
        n *= 2
    return results


def print_pod(results: dict[str, Any]) -> None:
    size, hosts = results["host_file_mib"], results["hosts"]
    print(f"\n{hosts} hosts x {size:.1f} MiB TPU host files; JSON export {results['json_mib']:.2f} MiB; "
          f"the same rows in every mode: {results['same_rows']}")
    print("| mode | wall s (fastest; every round) | s per host | CPU s (command + its workers) | CPU s: command; "
          "each worker | load avg (1 min) | command peak RSS MiB (x host file) | largest worker peak RSS MiB (x host file) |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in results["modes"].items():
        walls = ", ".join(f"{w:.1f}" for w in r["walls"])
        print(f"| {label} | {r['seconds']:.1f} ({walls}) | {r['seconds'] / hosts:.1f} | {r['cpu_s']:.1f} | {_split(r)} | "
              f"{r['load']:.1f} | {_cell(r['command_peak_mib'], size)} | {_cell(r['worker_peak_mib'], size)} |")
    x = results.get("xprof_hlo_stats_one_host")
    if x:
        print(f"| xprof hlo_stats, one host file | {x['seconds']:.1f} (process {x['process_seconds']:.1f}) | "
              f"{x['seconds']:.1f} | | | {_cell(x['command_peak_mib'], size)} | |")
    print("\n| hosts (--jobs 2) | wall s | s per host | CPU s | CPU s: command; each worker | load avg | "
          "command peak RSS MiB | largest worker peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for n, r in results["growth"].items():
        print(f"| {n} | {r['seconds']:.1f} | {r['seconds'] / int(n):.1f} | {r['cpu_s']:.1f} | {_split(r)} | {r['load']:.1f} | "
              f"{r['command_peak_mib']:.0f} | {r['worker_peak_mib']:.0f} |")


def _split(r: dict[str, Any]) -> str:
    """CPU seconds of the command; of each of its workers."""
    workers = ", ".join(f"{c:.1f}" for c in r.get("worker_cpu_s", []))
    return f"{r.get('command_cpu_s', 0.0):.1f}" + (f"; {workers}" if workers else "")


def memory_curve(xplane: Path, source: Path | None, work: Path, jobs: int, most: int = 16,
                 command: str = "stats") -> list[dict[str, Any]]:
    """The command's peak RSS as the hosts grow: 1, 2, 4, ... ``most`` copies of one host file (links).
    ``command``: ``stats`` (``--format json``), ``diagnose`` (``--format json``, no what-if: what it
    reads, not what it times) or ``gate`` (the pod against itself, ``--format json``)."""
    size = xplane.stat().st_size / 2**20
    rows = []
    for n in [1 << k for k in range(max(most, 1).bit_length()) if 1 << k <= most]:
        run = work / f"curve{n}" / "plugins" / "profile" / RUN
        run.mkdir(parents=True, exist_ok=True)
        for h in range(n):
            link = run / f"host-{h}.xplane.pb"
            if not link.exists():
                link.symlink_to(xplane.resolve())
        logdir = str(run.parents[2])
        args = {"stats": [logdir, "--jobs", str(jobs)], "diagnose": [logdir, "--jobs", str(jobs), "--no-what-if"],
                "gate": [logdir, logdir, "--jobs", str(jobs)]}[command]
        r = run_stats([*args, "--format", "json", "-o", str(work / "curve.json")], source=source, command=command,
                      ok=(0, 1))
        rows.append({"hosts": n, "command": command, **r})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{xplane.name}: {size:.1f} MiB per host, hlo-doctor {command}, --jobs {jobs}")
    print("| hosts | wall s | CPU s: command; each worker | load avg | command peak RSS MiB (x host file) | "
          "largest worker peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['hosts']} | {r['seconds']:.1f} | {_split(r)} | {r['load']:.1f} | "
              f"{_cell(r['command_peak_mib'], size)} | {r['worker_peak_mib']:.0f} |")
    return rows


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
    parser.add_argument("--skip-growth", action="store_true", help="no 1-to-N hosts runs")
    parser.add_argument("--skip-dask", action="store_true", help="no Dask workers mode")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of the three modes (the fastest is kept)")
    parser.add_argument("--rss", nargs="+", type=Path, metavar="FILE")
    parser.add_argument("--source", type=Path, default=None, help="hlo-doctor source tree to run (--rss)")
    parser.add_argument("--replicate", nargs=3, metavar=("XPLANE", "COPIES", "OUT"))
    parser.add_argument("--curve", type=Path, metavar="XPLANE", help="the command's peak RSS over 1 to 16 copies")
    parser.add_argument("--jobs", type=int, default=2, help="--jobs of --curve")
    parser.add_argument("--curve-hosts", type=int, default=16, help="the most hosts of --curve (1, 2, 4, ... up to it)")
    parser.add_argument("--command", choices=("stats", "diagnose", "gate"), default="stats",
                        help="the command --curve runs (default: stats)")
    args = parser.parse_args()
    if args.replicate:
        xplane, copies, out = args.replicate
        print(replicate(Path(xplane), int(copies), Path(out)))
        return
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="hlo-doctor-bench-pod-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.curve:
        curve = memory_curve(args.curve.resolve(), args.source, work, args.jobs, args.curve_hosts, args.command)
        (work / "curve-results.json").write_text(json.dumps(curve, indent=1))
        return
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
