"""Readers of one host file side by side: hlo-doctor ``stats``, xprof's ``hlo_stats`` and the Rust backend.

Each reader runs in its own process on the same file, in turn, ``--repeat`` times (interleaved, so
a change of load falls on all of them, each round starting with the next reader), and the median wall time and the peak RSS (``VmHWM``, the
process and every process it started) are reported with the ratio to the fastest:

- ``hlo-doctor``: ``hlo-doctor stats FILE --format json`` (imports, the worker process, the table,
  the export: what a user waits for), with the compiled reader of the events and again with the numpy
  one (``HLO_DOCTOR_NUMPY_READER=1``: what an install without a C compiler runs); the two documents
  must be the same;
- ``hlo-doctor ..., no parquet extra``: the same command where pyarrow cannot be imported, as in an
  install without the ``parquet`` extra (pandas imports pyarrow wherever it is installed);
- ``xprof``: ``xspace_to_tool_data([copy], "hlo_stats", {})`` of the installed xprof on a copy (it
  writes cache files beside its input);
- ``xprof-rs``: the Rust backend of xprof's tools (``pip install xprof-rs``; ``--xprof-rs BIN``, else
  found on PATH), started cold on 127.0.0.1 with ``--logdir`` over a copy, and timed from its start
  to the answer of ``GET /data/plugin/profile/data?run=RUN&tag=hlo_stats&host=HOST``.

Rows are compared: (program id, op) -> occurrences and total time, hlo-doctor's against each
reader's (xprof's tables are empty for an XLA:CPU trace; that is said, not counted as a difference).

``--stages`` times hlo-doctor's read of the file stage by stage in this process (docs/profile.md):
the events' wire decode, the rest of the walk of the planes (op keys, module runs, steps, columns),
the sums over the steps, the HLO modules' parse, the table, the JSON export.

Usage::

    python benchmarks/bench_readers.py --generate-tpu 111 [--generate-gpu 1000] [--xplane FILE...]
        [--repeat 3] [--xprof-rs BIN] [--no-xprof] [--stages] [--workdir DIR]

Generated traces go to ``--workdir`` (default: a temporary folder) and are never committed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from bench_pod_procs import Sampler, env, replicate, run_stats, xprof_hlo_stats  # noqa: E402

GPU_CAPTURE = REPO / "sample_traces" / "gpu_h200_original"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _logdir(xplane: Path, root: Path) -> tuple[Path, str, str]:
    """A log directory holding ``xplane`` as one run's one host (a hard link, else a copy)."""
    run, host = "run1", xplane.name.removesuffix(".xplane.pb")
    where = root / "plugins" / "profile" / run
    where.mkdir(parents=True, exist_ok=True)
    target = where / xplane.name
    try:
        os.link(xplane, target)
    except OSError:
        shutil.copy(xplane, target)
    return root, run, host


def xprof_rs(binary: str, xplane: Path) -> dict[str, Any]:
    """The Rust backend's cold ``hlo_stats`` of ``xplane``: start, first answer, peak RSS, rows."""
    with tempfile.TemporaryDirectory() as tmp:
        logdir, run, host = _logdir(xplane, Path(tmp))
        port = _free_port()
        t0 = time.perf_counter()
        proc = subprocess.Popen([binary, "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sampler = Sampler(proc.pid, set())
        url = f"http://127.0.0.1:{port}/data/plugin/profile/data?run={run}&tag=hlo_stats&host={host}"
        body, error = b"", ""
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(url, timeout=600) as r:
                        body = r.read()
                    break
                except urllib.error.HTTPError as exc:  # it answered: with an error
                    error = f"HTTP {exc.code}: {exc.read()[:200].decode('utf-8', 'replace').strip()}"
                    break
                except (ConnectionError, urllib.error.URLError):
                    if proc.poll() is not None:
                        raise SystemExit(f"{binary} exited ({proc.returncode}) before it answered") from None
                    time.sleep(0.01)
            seconds = time.perf_counter() - t0
        finally:
            peaks = sampler.stop()
            proc.terminate()
            proc.wait(10)
    table = json.loads(body) if body else {"cols": [], "rows": []}
    return {"seconds": seconds, "cpu_s": peaks["command_cpu_s"], "peak_mib": peaks["command_peak_mib"],
            "rows": None if error else _gviz_rows(table),
            "error": error}


def _gviz_rows(table: dict[str, Any]) -> dict[tuple[str, str], tuple[float, float]]:
    """(program id, op) -> (occurrences, total time us) of an xprof hlo_stats DataTable."""
    ids = [c["id"] for c in table.get("cols", [])]
    out = {}
    for row in table.get("rows", []):
        cells = dict(zip(ids, (c.get("v") for c in row["c"]), strict=False))
        out[(str(cells["program_id"]), str(cells["hlo_op_name"]))] = (float(cells["occurrences"]),
                                                                      float(cells["total_time"]))
    return out


def hlo_doctor(xplane: Path, numpy_reader: bool = False, without_pyarrow: bool = False) -> dict[str, Any]:
    """``hlo-doctor stats FILE --format json``: wall, peak RSS over its processes, rows
    (``numpy_reader``: with the compiled reader of the events turned off, ``HLO_DOCTOR_NUMPY_READER``;
    ``without_pyarrow``: as an install without the ``parquet`` extra runs it, pyarrow made unimportable
    by a ``sitecustomize`` on the path: pandas loads pyarrow, 35-45 MiB, wherever it is installed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stats.json"
        extra = {"HLO_DOCTOR_NUMPY_READER": "1"} if numpy_reader else {}
        if without_pyarrow:
            (Path(tmp) / "sitecustomize.py").write_text("import sys\nsys.modules['pyarrow'] = None\n")
            extra["PYTHONPATH"] = os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH", "")) if p)
        r = run_stats([str(xplane), "--format", "json", "-o", str(out)], extra_env=extra or None)
        doc = json.loads(out.read_text())
    peak = max(r["command_peak_mib"], r["worker_peak_mib"])
    rows = {(str(x["program_id"]), str(x["op"])): (float(x["occurrences"]), float(x["total_time_us"]))
            for x in doc["rows"]}
    return {"seconds": r["seconds"], "cpu_s": r["cpu_s"], "peak_mib": peak, "rows": rows, "load": r["load"],
            "doc": doc}


def xprof(xplane: Path) -> dict[str, Any]:
    """xprof's own ``hlo_stats`` conversion (its process: imports and the copy not timed)."""
    r = xprof_hlo_stats(xplane)
    return {"seconds": r["seconds"], "cpu_s": r["cpu_s"], "peak_mib": r["command_peak_mib"], "rows": None}


def _differences(ours: dict[tuple[str, str], tuple[float, float]],
                 theirs: dict[tuple[str, str], tuple[float, float]] | None, error: str = "") -> str:
    if error:
        return f"no table: {error}"
    if theirs is None:
        return "not compared"
    if not theirs:
        return "its table is empty"
    keys = set(ours) | set(theirs)
    bad = [k for k in keys if k not in ours or k not in theirs or ours[k][0] != theirs[k][0]
           or abs(ours[k][1] - theirs[k][1]) > 1e-6 * max(1.0, abs(theirs[k][1]))]
    return f"{len(bad)} of {len(keys)} rows differ"


def compare(xplane: Path, repeat: int, rs_binary: str | None, with_xprof: bool = True) -> list[str]:
    readers: list[tuple[str, Callable[[Path], dict[str, Any]]]] = [
        ("hlo-doctor stats", hlo_doctor), ("hlo-doctor stats, numpy reader", lambda p: hlo_doctor(p, True)),
        ("hlo-doctor stats, no parquet extra (no pyarrow)", lambda p: hlo_doctor(p, without_pyarrow=True))]
    if with_xprof:
        readers.append(("xprof hlo_stats", xprof))
    if rs_binary:
        readers.append(("xprof-rs hlo_stats (cold)", lambda p: xprof_rs(rs_binary, p)))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in readers}
    for r in range(repeat):
        # Each round starts with the next reader: what a reader leaves behind (a server shutting down,
        # the page cache) falls on each of them in turn, not on the first one every round.
        for name, fn in readers[r % len(readers):] + readers[:r % len(readers)]:
            runs[name].append(fn(xplane))
    ours = runs["hlo-doctor stats"][-1]["rows"]
    # The two readers of the events must give the same document, byte for byte once serialized.
    same = json.dumps(runs["hlo-doctor stats"][-1]["doc"]) == json.dumps(runs["hlo-doctor stats, numpy reader"][-1]["doc"])
    loads = [r["load"] for r in runs["hlo-doctor stats"]]
    medians = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    fastest = min(medians.values())
    size = xplane.stat().st_size / (1 << 20)
    lines = [f"{xplane.name}: {size:.1f} MiB, median of {repeat}, load average {min(loads):.1f}-{max(loads):.1f}; "
             f"compiled and numpy readers' JSON {'the same' if same else 'DIFFERENT'}", "",
             "| reader | wall s (median) | runs | CPU s (median) | x fastest CPU | peak RSS MiB | x file | x fastest wall "
             "| rows | vs hlo-doctor's rows |", "|---|---|---|---|---|---|---|---|---|---|"]
    cpus = {name: statistics.median(r["cpu_s"] for r in rs) for name, rs in runs.items()}
    for name, rs in runs.items():
        peak = max(r["peak_mib"] for r in rs)
        rows = rs[-1]["rows"]
        each = ", ".join(f"{r['seconds']:.2f}" for r in rs)
        lines.append(f"| {name} | {medians[name]:.2f} | {each} | {cpus[name]:.2f} | "
                     f"{cpus[name] / min(cpus.values()):.2f} | "
                     f"{peak:.0f} | {peak / size:.1f} | {medians[name] / fastest:.2f} | "
                     f"{len(rows) if rows is not None else ''} | "
                     f"{'' if name == 'hlo-doctor stats' else _differences(ours, rows, rs[-1].get('error', ''))} |")
    if not rs_binary:
        lines += ["", "(xprof-rs not found: pip install xprof-rs in a separate venv and pass --xprof-rs BIN)"]
    return lines


def stages(xplane: Path) -> list[str]:
    """hlo-doctor's read of one host file, stage by stage, in this process."""
    from hlo_doctor.hosts.merge import merge_parts
    from hlo_doctor.hosts.work import HostTask, read_one
    from hlo_doctor.opstats.export_json import to_json
    from hlo_doctor.trace import device, device_lines
    from hlo_doctor.trace.stream import XSpaceFile
    from hlo_doctor.trace.xspace import stat_names

    times: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        times[name] = times.get(name, 0.0) + time.perf_counter() - t0
        return out

    def decode_only() -> int:
        n = 0
        with XSpaceFile(xplane) as xs:
            for ref in xs._planes():
                plane = xs.plane(ref)
                names = stat_names(plane)
                by = {v: k for k, v in names.items()}
                ops = {k: v for k, v in names.items() if v in device._OP_STATS}
                for line in plane.lines:
                    n += len(device_lines.scan(line, by.get("device_offset_ps", -1), by.get("device_duration_ps", -1),
                                               ops, names).mids)
        return n

    events = timed("events: wire decode (every line of every plane)", decode_only)
    part = timed("the whole host read (decode, walk, steps, sums)", lambda: read_one(HostTask(path=str(xplane))))
    timed("merge: HLO modules parsed, the table built", lambda: merge_parts([part], source_path=str(xplane)))
    stats = merge_parts([part], source_path=str(xplane))
    # As ``stats --format json`` writes it (``--per-step`` adds every step's samples).
    timed("export: the JSON document", lambda: to_json(stats, per_step=False, compact=True))
    total = times["the whole host read (decode, walk, steps, sums)"]
    walk = total - times["events: wire decode (every line of every plane)"]
    lines = [f"{xplane.name}: {xplane.stat().st_size / (1 << 20):.1f} MiB, {events:,} events", "",
             "| stage | seconds |", "|---|---|"]
    lines.append(f"| events: wire decode | {times['events: wire decode (every line of every plane)']:.2f} |")
    lines.append(f"| the rest of the host read (op keys, module runs, steps, columns, sums) | {walk:.2f} |")
    lines.append(f"| merge: HLO modules parsed, the table built | {times['merge: HLO modules parsed, the table built']:.2f} |")
    lines.append(f"| export: the JSON document | {times['export: the JSON document']:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--xplane", type=Path, action="append", default=[])
    parser.add_argument("--generate-tpu", type=float, metavar="MB", help="a 4-chip TPU trace of about MB")
    parser.add_argument("--generate-gpu", type=int, metavar="COPIES", help="the H200 capture repeated COPIES times")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--xprof-rs", default=shutil.which("xprof-rs"))
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--no-xprof", action="store_true", help="leave out xprof's own conversion (minutes)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-readers-"))
    work.mkdir(parents=True, exist_ok=True)
    files = [p.resolve() for p in args.xplane]
    if args.generate_tpu:
        out = work / "tpu.xplane.pb"
        subprocess.run([sys.executable, str(HERE / "bench_device_trace.py"), "--generate", str(out),
                        str(args.generate_tpu), "4"], check=True, env=env(), stdout=subprocess.DEVNULL)
        files.append(out)
    if args.generate_gpu:
        (capture,) = GPU_CAPTURE.glob("plugins/profile/*/*.xplane.pb")
        files.append(replicate(capture, args.generate_gpu, work / "gpu.xplane.pb"))
    for xplane in files:
        report = stages(xplane) if args.stages else compare(xplane, args.repeat, args.xprof_rs, not args.no_xprof)
        print("\n".join(report), flush=True)
        print()


if __name__ == "__main__":
    main()
