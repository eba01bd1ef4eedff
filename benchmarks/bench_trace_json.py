"""Reading a capture from its trace JSON against reading it from its xplane: CPU time and peak RSS.

Two captures, each read as an xplane and as trace JSON, every read in its own subprocess (``load_opstats(FILE)``, the
table ``stats`` prints), alternating xplane / JSON runs so that load from other jobs hits both:

- an XLA:CPU capture (``bench_opstats.py``'s program: ``--cpu-mb`` MiB of xplane, 1,200 annotated
  steps or more): its ``vm.xplane.pb``, jax's own ``vm.trace.json.gz`` written beside it, and xprof's
  ``trace_viewer`` export of the xplane, gzipped as people share it;
- a TPU-layout trace (``bench_device_trace.py``'s generator: 8 cores, device ``Steps``, ``XLA
  Modules`` and ``XLA Ops`` lines, ``--tpu-mb`` MiB of xplane) and xprof's ``trace_viewer`` export.

xprof converts a copy of each xplane (it writes cache files beside its input). Per run: CPU seconds
(user + sys) of ``load_opstats`` alone and of the whole process (imports included, as ``time
hlo-doctor stats`` sees it), wall seconds, peak RSS (VmHWM), and whether the table equals the
xplane's row for row (module, op, occurrences, total time; program ids where the JSON has them).

``--before DIR`` also reads each JSON with the hlo-doctor of another checkout (``git worktree add
DIR COMMIT``), so one run compares the reader before and after a change under the same load.

Usage::

    python benchmarks/bench_trace_json.py [--workdir DIR] [--cpu-mb 50] [--tpu-mb 21] [--repeat 2]
                                          [--before DIR]

The captures are generated into ``--workdir`` (default: a temporary directory; reused when it
already holds them) and never committed. The load average is printed before and after: the
figures move with it. Small settings first on a shared machine (``--cpu-mb 4 --tpu-mb 3
--repeat 1``: the XLA:CPU capture has at least 1,200 steps, about 50 MiB, whatever the size asked).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
BENCH = HERE.parent
ENV = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measure(path: Path) -> dict[str, Any]:
    """One read of ``path`` in this process: seconds, peak RSS and the table's rows."""
    from hlo_doctor.opstats import load_opstats

    cpu0, wall0 = _cpu_seconds(), time.perf_counter()
    stats = load_opstats(path)
    cpu, wall = _cpu_seconds() - cpu0, time.perf_counter() - wall0
    rows = sorted((str(r["module"]), -1 if r["program_id"] is None else int(r["program_id"]), str(r["op"]),
                   int(r["occurrences"]), round(float(r["total_time_us"]), 3))
                  for r in stats.table.to_dict(orient="records"))
    return {"cpu_s": cpu, "wall_s": wall, "process_cpu_s": _cpu_seconds(), "peak_rss_mib": _peak_rss_mib(),
            "rows": rows, "steps": int(stats.num_steps)}


def _child(path: Path, tree: Path | None = None) -> dict[str, Any]:
    """One read in a fresh process; with ``tree``, by the hlo-doctor of that checkout."""
    env = dict(ENV, PYTHONPATH=str(tree)) if tree else ENV
    done = subprocess.run([sys.executable, str(HERE), "--child", str(path)], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _xprof_json(xplane: Path, out: Path) -> Path:
    """xprof's ``trace_viewer`` export of ``xplane`` (converted from a copy), gzipped."""
    if out.exists():
        return out
    code = (
        "import shutil, sys, tempfile, gzip\n"
        "from pathlib import Path\n"
        "from xprof.convert import raw_to_tool_data\n"
        "with tempfile.TemporaryDirectory() as tmp:\n"
        "    copy = Path(tmp) / Path(sys.argv[1]).name\n"
        "    shutil.copy(sys.argv[1], copy)\n"
        "    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], 'trace_viewer', {})\n"
        "Path(sys.argv[2]).write_bytes(gzip.compress(data.encode() if isinstance(data, str) else data, 6))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(xplane), str(out)], env=ENV, check=True, capture_output=True)
    return out


def _cpu_capture(work: Path, size_mb: float) -> Path:
    """The XLA:CPU capture's xplane (``bench_opstats.py``'s program, grown to ``size_mb``)."""
    out = work / "cpu"
    found = sorted(out.glob("plugins/profile/*/*.xplane.pb"))
    if found and found[0].stat().st_size >= size_mb * 2**20 * 0.9:
        return found[0]
    steps = 1200
    while True:
        shutil.rmtree(out, ignore_errors=True)
        done = subprocess.run([sys.executable, str(BENCH / "bench_opstats.py"), "--generate", str(out), "120",
                               str(steps)], env=ENV, capture_output=True, text=True, check=True)
        xplane = Path(done.stdout.strip().splitlines()[-1])
        got = xplane.stat().st_size / 2**20
        if got >= size_mb * 0.9:
            return xplane
        steps = int(steps * size_mb / max(got, 0.5) * 1.05) + 1


def _tpu_capture(work: Path, size_mb: float) -> Path:
    path = work / "tpu" / "vm.xplane.pb"
    if not path.exists():
        subprocess.run([sys.executable, str(BENCH / "bench_device_trace.py"), "--generate", str(path),
                        str(size_mb), "8"], env=ENV, check=True, capture_output=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--cpu-mb", type=float, default=50.0)
    parser.add_argument("--tpu-mb", type=float, default=21.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--before", type=Path, default=None,
                        help="also read each JSON with the hlo-doctor of this checkout (a worktree of an earlier commit)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.child)))
        return

    work = args.workdir or Path(tempfile.mkdtemp(prefix="hlo-doctor-bench-json-"))
    work.mkdir(parents=True, exist_ok=True)
    cpu = _cpu_capture(work, args.cpu_mb)
    tpu = _tpu_capture(work, args.tpu_mb)
    jax_json = cpu.with_name(cpu.name.removesuffix(".xplane.pb") + ".trace.json.gz")
    files = {
        "XLA:CPU": [("xplane", cpu), ("jax JSON", jax_json), ("xprof JSON", _xprof_json(cpu, work / "cpu.trace.json.gz"))],
        "TPU layout": [("xplane", tpu), ("xprof JSON", _xprof_json(tpu, work / "tpu.trace.json.gz"))],
    }
    from hlo_doctor.trace.json_decode import BACKEND

    print(f"JSON decoder: {BACKEND}; load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'capture':11} {'file':20} {'MiB':>7} {'text MiB':>9} {'read CPU s':>16} {'process CPU s':>16} "
          f"{'wall s':>14} {'peak MiB':>9} {'rows':>5} {'table':>6}")
    results: list[dict[str, Any]] = []
    for capture, entries in files.items():
        entries = [(label, path) for label, path in entries if path.exists()]
        if args.before:
            entries += [(f"{label} (before)", path) for label, path in entries if label != "xplane"]
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in entries}
        for _ in range(args.repeat):
            for label, path in entries:  # alternate: the load of the moment falls on every file
                runs[label].append(_child(path, args.before if label.endswith("(before)") else None))
        reference = runs["xplane"][0]["rows"]
        for label, path in entries:
            rs = runs[label]
            text_mib = len(gzip.decompress(path.read_bytes())) / 2**20 if path.name.endswith(".gz") else float("nan")
            same = all(_same_rows(r["rows"], reference, with_ids=label == "xplane" or capture != "XLA:CPU")
                       for r in rs)
            row = {"capture": capture, "file": label, "mib": path.stat().st_size / 2**20, "text_mib": text_mib,
                   "read_cpu_s": [round(r["cpu_s"], 2) for r in rs],
                   "process_cpu_s": [round(r["process_cpu_s"], 2) for r in rs],
                   "wall_s": [round(r["wall_s"], 2) for r in rs],
                   "peak_rss_mib": max(r["peak_rss_mib"] for r in rs), "rows": len(rs[0]["rows"]), "same": same}
            results.append(row)
            print(f"{capture:11} {label:20} {row['mib']:>7.1f} {text_mib:>9.0f} "
                  f"{', '.join(f'{x:.2f}' for x in row['read_cpu_s']):>16} "
                  f"{', '.join(f'{x:.2f}' for x in row['process_cpu_s']):>16} "
                  f"{', '.join(f'{x:.1f}' for x in row['wall_s']):>14} {row['peak_rss_mib']:>9.0f} "
                  f"{row['rows']:>5} {'equal' if same else 'DIFF':>6}")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    (work / "results.json").write_text(json.dumps(results, indent=1))
    print(f"captures and results.json in {work}")


def _same_rows(rows: list[list[Any]], reference: list[list[Any]], *, with_ids: bool) -> bool:
    """Row for row equal; program ids compared only where the file carries them."""
    def key(r: list[Any]) -> tuple[Any, ...]:
        return tuple(r) if with_ids else (r[0], r[2], r[3], r[4])
    return sorted(map(key, rows)) == sorted(map(key, reference))


if __name__ == "__main__":
    main()
