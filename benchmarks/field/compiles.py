"""Count the real XLA compiles in a capture, by program, from the trace alone (a judge for
hlo-doctor's compile accounting).

    python benchmarks/field/compiles.py RUN_DIR [RUN_DIR ...]

The events are read from the ``.xplane.pb`` (the ``trace.json.gz`` beside it can be cut short on a
long capture), with hlo-doctor's protobuf reader of the XSpace (only the parsing, not its counts).
A real compile is one ``backend_compile_and_load`` TraceMe (jax's call into the PJRT compiler; the
compiler's own nested events, ``PjRtCpuClient::Compile`` and below, are not counted again). It is
named by the ``PjitFunction(NAME)`` span that encloses it on the same thread (the jitted function
or eager primitive that missed its cache), else by the first XLA module that runs after it on any
thread. ``$pjit.py cache_miss`` spans are counted apart: most of them are traces (an op traced
into a jaxpr under a ``while_loop`` or a ``jit``), not compiles.
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any


def events(run: Path) -> list[dict[str, Any]]:
    """Every event of the capture's host planes: name, ts/dur (us), thread, and stats."""
    from hlo_doctor.trace import xspace

    path = next(run.glob("plugins/profile/*/*.xplane.pb"))
    out: list[dict[str, Any]] = []
    for data in xspace.split_planes(path.read_bytes(), str(path)):
        plane = xspace.parse_plane(data, str(path))
        if not plane.name.startswith("/host:"):
            continue
        names = {m.key: m.value.name for m in plane.event_metadata}
        stats = xspace.stat_names(plane)
        for line in plane.lines:
            for ev in line.events:
                out.append({
                    "name": names.get(ev.metadata_id, ""), "tid": line.id, "pid": plane.id,
                    "ts": line.timestamp_ns / 1e3 + ev.offset_ps / 1e6,
                    "dur": ev.duration_ps / 1e6,
                    "args": dict(xspace.stat_items(ev.stats, stats))})
    return out


def count(run: Path) -> dict[str, Any]:
    """Compiles by program name (count, ms), and the cache-miss spans (count, ms)."""
    evs = events(run)
    pjit = [e for e in evs if e["name"].startswith("PjitFunction(")]
    execs = sorted((e["ts"], e["args"]["hlo_module"]) for e in evs
                   if "hlo_module" in e.get("args", {}))
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for c in (e for e in evs if e["name"] == "backend_compile_and_load"):
        end = c["ts"] + c["dur"]
        around = [p for p in pjit if p["tid"] == c["tid"] and p["pid"] == c["pid"]
                  and p["ts"] <= c["ts"] and p["ts"] + p["dur"] >= end]
        if around:
            name = min(around, key=lambda p: p["dur"])["name"][len("PjitFunction("):-1]
        else:
            name = next((m for ts, m in execs if ts >= end), "?")
        by_name[name].append(c["dur"] / 1e3)
    misses = [e["dur"] / 1e3 for e in evs if e["name"].endswith("cache_miss")]
    return {"compiles": sum(len(v) for v in by_name.values()),
            "compile_ms": sum(sum(v) for v in by_name.values()),
            "by_program": {k: {"n": len(v), "ms": sum(v)} for k, v in
                           sorted(by_name.items(), key=lambda kv: -sum(kv[1]))},
            "cache_miss_spans": len(misses), "cache_miss_ms": sum(misses)}


def main() -> None:
    """Command line: see the module docstring."""
    for arg in sys.argv[1:]:
        r = count(Path(arg))
        progs = ", ".join(f"{k} x{v['n']} ({v['ms']:.0f} ms)" for k, v in r["by_program"].items())
        print(f"{Path(arg).name}: {r['compiles']} compiles, {r['compile_ms']:.0f} ms"
              f"{': ' + progs if progs else ''}; {r['cache_miss_spans']} pjit cache_miss spans "
              f"({r['cache_miss_ms']:.0f} ms, traces included)")


if __name__ == "__main__":
    main()
