"""Reading programs' memory side by side: hlo-doctor's ``read_memory`` and xprof's memory viewer.

In one process, interleaved round by round (a change of load falls on every reader), on a capture's
xplane (default: ``sample_traces/engine_b64_original_a``, 67 programs on XLA:CPU):

- ``xprof one``: ``xspace_to_tool_data([copy], "memory_viewer", {"module_name": LABEL})`` of the
  installed xprof for one program, after ``xspace_to_tool_names`` wrote the HloProtos beside the copy
  once (not timed: what its viewer does once per session);
- ``hlo-doctor one``: ``read_memory(RUN, only=(LABEL,))``: that program alone (``memory --program``);
- ``hlo-doctor step``: ``read_memory(RUN, describe="step")``: every program's figures, the buffers of
  the step's programs described (what ``memory`` and ``stats --memory`` print as a table);
- ``hlo-doctor all``: ``read_memory(RUN)``: every program's buffers described (``--format json``),
  which reads the instructions every module's buffers need from its ``HloModuleProto``.

Each round also checks that the program's peak equals xprof's ``peakHeapMib`` and that the step view
gives the same peaks as the whole read. The median seconds and the ratio to xprof's are printed with
the load average.

``--stats XPLANE`` times instead ``hlo-doctor stats XPLANE --format json`` with and without
``--memory``, each in its own process, alternated ``--repeat`` times (a large trace from
``benchmarks/bench_device_trace.py --generate OUT SIZE_MB CORES``): what the memory section adds to
a read of the whole trace.

Usage::

    python benchmarks/bench_memory_read.py [--run DIR] [--program LABEL] [--repeat 7] [--stats XPLANE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, default=ROOT / "sample_traces" / "engine_b64_original_a")
    ap.add_argument("--program", default="jit_decode_forward(46)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--stats", type=Path, default=None, help="time 'stats' with and without --memory on this file")
    args = ap.parse_args()
    if args.stats is not None:
        _stats(args.stats, args.repeat)
        return

    from xprof.convert import raw_to_tool_data

    from hlo_doctor.cli.memory import _steps_beside
    from hlo_doctor.memory import read_memory
    from hlo_doctor.trace import find_xplanes

    runs = _steps_beside(args.run)
    work = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    try:
        xplane = find_xplanes(args.run)[0]
        copy = work / xplane.name
        shutil.copy(xplane, copy)
        raw_to_tool_data.xspace_to_tool_names([str(copy)])

        def xprof_one() -> int:
            data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "memory_viewer",
                                                           {"module_name": args.program})
            return round(float(json.loads(data)["peakHeapMib"]) * 2**20)

        def ours_one() -> int:
            return read_memory(args.run, runs=runs, only=(args.program,)).programs[0].peak_bytes

        def ours_step() -> dict[str, int]:
            return {p.label: p.peak_bytes for p in read_memory(args.run, runs=runs, describe="step").programs}

        def ours_all() -> dict[str, int]:
            return {p.label: p.peak_bytes for p in read_memory(args.run, runs=runs).programs}

        readers = {"xprof one": xprof_one, "hlo-doctor one": ours_one, "hlo-doctor step": ours_step,
                   "hlo-doctor all": ours_all}
        times: dict[str, list[float]] = {k: [] for k in readers}
        for f in readers.values():
            f()  # warm: imports, caches
        for _ in range(args.repeat):
            got = {}
            for name, f in readers.items():
                t = time.perf_counter()
                got[name] = f()
                times[name].append(time.perf_counter() - t)
            assert got["xprof one"] == got["hlo-doctor one"] == got["hlo-doctor all"][args.program], got
            assert got["hlo-doctor step"] == got["hlo-doctor all"]
        load = os.getloadavg()
        programs = len(ours_all())
        print(f"{args.run.name}: {programs} programs; one program: {args.program}; {args.repeat} interleaved rounds; "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        base = statistics.median(times["xprof one"])
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:16s} median {med:7.3f} s  (min {min(ts):.3f}, max {max(ts):.3f})  x{med / base:.2f} xprof one")
        print(f"  peaks equal: {args.program} {got['hlo-doctor one']:,} bytes (xprof's too); step view = whole read")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _stats(xplane: Path, repeat: int) -> None:
    times: dict[str, list[float]] = {"stats": [], "stats --memory": []}
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as work:
        for _ in range(repeat):
            for name in times:
                cmd = [sys.executable, "-m", "hlo_doctor", "stats", str(xplane), *name.split()[1:], "--format", "json",
                       "-o", str(Path(work) / "out.json")]
                t = time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - t)
    load = os.getloadavg()
    print(f"{xplane.name} ({xplane.stat().st_size / 2**20:.0f} MiB): {repeat} alternated runs each; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for name, ts in times.items():
        print(f"  {name:16s} median {statistics.median(ts):7.2f} s  (min {min(ts):.2f}, max {max(ts):.2f})")


if __name__ == "__main__":
    main()
