"""Time and peak memory of the op-stats table on a large TPU trace: hlo-doctor vs xprof's hlo_stats.

Generates a synthetic TPU trace laid out as libtpu writes one (the conventions xprof reads):

- 8 planes ``/device:TPU:0..7`` (plane stats ``device_type_string``, peak FLOP/s and HBM bandwidth),
  each with a ``Steps`` line (events named by the step number, ``group_id`` stat), an ``XLA Modules``
  line (``module(program_id)`` events with a ``run_id``) and an ``XLA Ops`` line;
- ``XLA Ops`` metadata per (program id, op): name = the op's HLO text, display name = the op name,
  stats ``program_id`` (uint64, above 2**63), non-zero ``symbol_id``, ``hlo_category``, ``flops``,
  ``bytes_accessed``, ``source`` and ``source_stack`` (the op's HLO stack, innermost first); the
  sampler is recompiled half-way under a second id with the same op text;
- every event carries ``device_offset_ps`` / ``device_duration_ps`` (the device clock); the event's
  own offset and duration are deliberately off (host clock);
- ``/host:metadata`` holds the real HLO modules (compiled on CPU) as ``Hlo Proto`` stats.

Then each tool runs in its own subprocess on the same file (peak RSS is that conversion's alone):
``hlo-doctor``: ``load_opstats(xplane)``; ``xprof hlo_stats``:
``xspace_to_tool_data([copy], "hlo_stats", {})`` on a copy (xprof writes cache files beside its input).

Usage::

    python benchmarks/bench_device_trace.py [--workdir DIR] [--size-mb 200] [--cores 8] [--xplane FILE]

The trace is generated into ``--workdir`` (default: a temporary directory) and never committed.
"""

from __future__ import annotations

import argparse
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
# The protobuf wire writer of the tests' XSpace builder: a 200 MB trace is streamed field by field.
sys.path.insert(0, str(HERE.parents[1] / "tests" / "trace"))
from xspace_builder import field, varint  # noqa: E402

DECODE_ID = (1 << 63) + 4_605_101_009_421_512_345
SAMPLER_IDS = (12190760917235803885, 17293822569102704642)
STEP_PS = 1_800_000_000  # 1800 us per device step
SKEW_PS = 5_000_000


def _modules() -> list[tuple[str, bytes, list[tuple[str, str, str, tuple[str, ...]]]]]:
    """Real modules: a decode step (about 100 ops) and a sampler; (name, HloProto, [(op, text, category,
    stack)]), the stack as ``file:line`` frames, innermost first."""
    import jax
    import jax.numpy as jnp

    from hlo_doctor.hlo import parse_module

    def decode(x: jax.Array, ws: jax.Array) -> jax.Array:
        for i in range(ws.shape[0]):
            x = jnp.tanh(x @ ws[i]) * 0.5 + x
        return x

    def sample(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.argmax(logits.astype(jnp.float32), axis=-1), logits

    out = []
    for fn, args in ((decode, (jnp.ones((8, 64)), jnp.ones((48, 64, 64)))),
                     (sample, (jnp.ones((8, 4096), jnp.bfloat16),))):
        hlo = jax.jit(fn).lower(*args).compile().runtime_executable().hlo_modules()[0]
        parsed = parse_module(hlo.to_string())
        ops = []
        for inst in parsed.entry.instructions:
            if inst.opcode in ("parameter", "tuple", "get-tuple-element", "constant", "bitcast"):
                continue
            operands = ", ".join(f"{o.shape.text()} %{o.name}" for o in parsed.operands_of(inst))
            category = "loop fusion" if inst.opcode == "fusion" else inst.opcode
            ops.append((inst.name, f"%{inst.name} = {inst.shape.text()} {inst.opcode}({operands})", category,
                        tuple(f"{f.file}:{f.line}" for f in inst.stack)))
        module_proto = hlo.as_serialized_hlo_module_proto()
        out.append((parsed.name, field(1, module_proto), ops))
    return out


def generate(path: Path, *, size_mb: float = 200.0, cores: int = 8) -> Path:
    """Write a TPU trace of at least ``size_mb`` MiB to ``path``; return it."""
    from hlo_doctor.trace import xplane_pb2 as xp

    (decode_name, decode_proto, decode_ops), (sample_name, sample_proto, sample_ops) = _modules()
    programs = [(decode_name, DECODE_ID, decode_ops)] + [(sample_name, pid, sample_ops) for pid in SAMPLER_IDS]
    # About 36 bytes per op event (metadata id, offset, duration, two device-clock stats).
    ops_per_step = len(decode_ops) + len(sample_ops)
    steps = int(size_mb * 2**20 / 36 / ops_per_step / cores) + 1
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        meta = xp.XPlane(id=0, name="/host:metadata")
        meta.stat_metadata[1].id, meta.stat_metadata[1].name = 1, "Hlo Proto"
        meta.stat_metadata[2].id, meta.stat_metadata[2].name = 2, "program_id"
        for mid, (name, pid, _) in enumerate(programs, start=1):
            em = meta.event_metadata[mid]
            em.id, em.name, em.display_name = mid, f"{name}({pid})", f"{name}({pid})"
            em.stats.add(metadata_id=1, bytes_value=decode_proto if name == decode_name else sample_proto)
            em.stats.add(metadata_id=2, uint64_value=pid)
        f.write(field(1, meta.SerializeToString()))
        for core in range(cores):
            f.write(field(1, _core_plane(xp, core, programs, steps)))
    return path


def _core_plane(xp: Any, core: int, programs: list[tuple[str, int, list[tuple[str, str, str, tuple[str, ...]]]]],
                steps: int) -> bytes:
    plane = xp.XPlane(id=core + 1, name=f"/device:TPU:{core}")
    stat_names = ["device_type_string", "peak_teraflops_per_second", "peak_hbm_bw_gigabytes_per_second",
                  "program_id", "symbol_id", "hlo_category", "flops", "bytes_accessed", "run_id",
                  "group_id", "device_offset_ps", "device_duration_ps", "source", "source_stack"]
    sid = {name: i for i, name in enumerate(stat_names, start=1)}
    for name, i in sid.items():
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name
    plane.stats.add(metadata_id=sid["device_type_string"], str_value="TPU v5 lite")
    plane.stats.add(metadata_id=sid["peak_teraflops_per_second"], double_value=197.0)
    plane.stats.add(metadata_id=sid["peak_hbm_bw_gigabytes_per_second"], double_value=819.0)
    next_id = 1
    op_meta: dict[int, list[int]] = {}
    module_meta: dict[int, int] = {}
    for name, pid, ops in programs:
        module_meta[pid] = next_id
        em = plane.event_metadata[next_id]
        em.id, em.name = next_id, f"{name}({pid})"
        em.stats.add(metadata_id=sid["program_id"], uint64_value=pid)
        next_id += 1
        ids = []
        for symbol, (op, text, category, stack) in enumerate(ops, start=1):
            em = plane.event_metadata[next_id]
            em.id, em.name, em.display_name = next_id, text, op
            em.stats.add(metadata_id=sid["program_id"], uint64_value=pid)
            em.stats.add(metadata_id=sid["symbol_id"], int64_value=symbol)
            em.stats.add(metadata_id=sid["hlo_category"], str_value=category)
            em.stats.add(metadata_id=sid["flops"], uint64_value=1000 * symbol)
            em.stats.add(metadata_id=sid["bytes_accessed"], uint64_value=4096 * symbol)
            if stack:  # as libtpu writes them: xprof's trace JSON copies both into every op event
                em.stats.add(metadata_id=sid["source"], str_value=stack[0])
                em.stats.add(metadata_id=sid["source_stack"], str_value="\n".join(stack))
            ids.append(next_id)
            next_id += 1
        op_meta[pid] = ids
    step_meta = []
    for s in range(steps):
        em = plane.event_metadata[next_id]
        em.id, em.name = next_id, str(s)
        step_meta.append(next_id)
        next_id += 1

    def device_event(mid: int, offset_ps: int, duration_ps: int, extra: bytes = b"") -> bytes:
        stats = (field(4, b"\x08" + varint(sid["device_offset_ps"]) + b"\x20" + varint(offset_ps))
                 + field(4, b"\x08" + varint(sid["device_duration_ps"]) + b"\x20" + varint(duration_ps)))
        body = (b"\x08" + varint(mid) + b"\x10" + varint(offset_ps + SKEW_PS)
                + b"\x18" + varint(duration_ps * 5 // 4) + stats + extra)
        return field(4, body)

    step_events, module_events, op_events = [], [], []
    decode, sampler_ids = programs[0], [p[1] for p in programs[1:]]
    for s in range(steps):
        t = s * STEP_PS
        step_events.append(device_event(step_meta[s], t, STEP_PS,
                                        field(4, b"\x08" + varint(sid["group_id"]) + b"\x20" + varint(s))))
        sampler_pid = sampler_ids[0] if s < steps // 2 else sampler_ids[1]
        for pid in (decode[1], sampler_pid):
            start = t
            t += 1_000_000
            for k, mid in enumerate(op_meta[pid]):
                duration = 4_000_000 + 97_000 * ((k * 7 + core + s) % 29)
                op_events.append(device_event(mid, t, duration))
                t += duration + 100_000
            module_events.append(device_event(module_meta[pid], start, t - start,
                                              field(4, b"\x08" + varint(sid["run_id"]) + b"\x20" + varint(s))))
    lines = b""
    for line_id, name, events in ((1, "Steps", step_events), (2, "XLA Modules", module_events),
                                  (3, "XLA Ops", op_events)):
        head = xp.XLine(id=line_id, display_id=line_id, name=name, timestamp_ns=1_000_000).SerializeToString()
        lines += field(3, head + b"".join(events))
    return bytes(plane.SerializeToString()) + lines


def _vm(field: str) -> float:
    """A /proc/self/status figure in MiB (VmHWM: peak RSS of this process since exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measure(tool: str, xplane: Path) -> dict[str, Any]:
    """Run one conversion in this process; seconds, peak RSS (MiB), rows."""
    if tool == "hlo-doctor":
        import jax.profiler  # noqa: F401 - imported before timing, like xprof's converter below
        from jax._src.lib import xla_client  # noqa: F401

        from hlo_doctor.opstats import load_opstats

        base = _vm("VmRSS")
        t0 = time.perf_counter()
        stats = load_opstats(xplane)
        seconds = time.perf_counter() - t0
        table = [{"program_id": int(r.program_id), "op": str(r.op), "occurrences": int(r.occurrences),
                  "total_time_us": float(r.total_time_us)} for r in stats.table.itertuples(index=False)]
    else:
        from xprof.convert import raw_to_tool_data

        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / xplane.name
            shutil.copy(xplane, copy)
            base = _vm("VmRSS")
            t0 = time.perf_counter()
            data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "hlo_stats", {})
            seconds = time.perf_counter() - t0
        doc = json.loads(data)
        doc = doc[0] if isinstance(doc, list) else doc
        ids = [c["id"] for c in doc["cols"]]
        cells = [dict(zip(ids, [c.get("v") for c in r["c"]], strict=False)) for r in doc.get("rows") or []]
        table = [{"program_id": int(c["program_id"]), "op": str(c["hlo_op_name"]),
                  "occurrences": int(c["occurrences"]), "total_time_us": float(c["total_time"])} for c in cells]
    return {"seconds": seconds, "peak_rss_mib": _vm("VmHWM"), "rss_before_mib": base, "rows": len(table),
            "total_time_us": sum(r["total_time_us"] for r in table), "table": table}


def _differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    """How many (program id, op) rows differ between two tables (missing, occurrences, total time)."""
    def keyed(t: list[dict[str, Any]]) -> dict[tuple[int, str], tuple[int, float]]:
        return {(r["program_id"], r["op"]): (r["occurrences"], r["total_time_us"]) for r in t}
    ka, kb = keyed(a), keyed(b)
    return sum(1 for k in set(ka) | set(kb)
               if k not in ka or k not in kb or ka[k][0] != kb[k][0]
               or abs(ka[k][1] - kb[k][1]) > max(1e-3, 1e-6 * abs(kb[k][1])))


def _child(args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, str(HERE), *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        # A failing tool is a result too (the table shows why); a failing generator stops the run.
        last = (done.stderr.strip().splitlines() or ["exit " + str(done.returncode)])[-1]
        if args[0] == "--generate":
            raise SystemExit(f"generating the trace failed:\n{done.stderr[-3000:]}")
        return {"error": last}
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--size-mb", type=float, default=200.0)
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--xplane", type=Path, default=None, help="measure this trace instead of generating one")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "XPLANE"), help=argparse.SUPPRESS)
    parser.add_argument("--generate", nargs=3, metavar=("OUT", "SIZE_MB", "CORES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.child[0], Path(args.child[1]))))
        return
    if args.generate:
        out = generate(Path(args.generate[0]), size_mb=float(args.generate[1]), cores=int(args.generate[2]))
        print(json.dumps({"path": str(out)}))
        return

    work = args.workdir or Path(tempfile.mkdtemp(prefix="hlo-doctor-bench-device-"))
    xplane = args.xplane or work / "plugins" / "profile" / "2026_01_01_00_00_00" / "tpu-host.xplane.pb"
    if args.xplane is None:
        t0 = time.perf_counter()
        _child(["--generate", str(xplane), str(args.size_mb), str(args.cores)])
        print(f"generated {xplane} in {time.perf_counter() - t0:.0f} s")
    size = xplane.stat().st_size / 2**20
    print(f"{xplane}: {size:.1f} MiB")
    results = {tool: _child(["--child", tool, str(xplane)]) for tool in ("hlo-doctor", "xprof hlo_stats")}
    ours = results["hlo-doctor"]
    ours_seconds = float(ours.get("seconds", "nan"))
    print(f"{'tool':16} {'seconds':>8} {'peak RSS MiB':>13} {'x file size':>12} {'growth MiB':>11} {'rows':>6} "
          f"{'total op time us':>17} {'time / hlo-doctor':>18}")
    for tool, r in results.items():
        if "error" in r:
            print(f"{tool:16} failed: {r['error']}")
            continue
        print(f"{tool:16} {r['seconds']:>8.1f} {r['peak_rss_mib']:>13.0f} {r['peak_rss_mib'] / size:>12.1f} "
              f"{r['peak_rss_mib'] - r['rss_before_mib']:>11.0f} "
              f"{r['rows']:>6} {r['total_time_us']:>17.1f} {r['seconds'] / ours_seconds:>18.2f}")
    if "table" in ours and "table" in results["xprof hlo_stats"]:
        differ = _differences(ours["table"], results["xprof hlo_stats"]["table"])
        print(f"rows that differ between hlo-doctor and xprof (program id, op, occurrences, total time): {differ}")
    (work / "results.json").write_text(json.dumps({"size_mib": size, "cores": args.cores, **results}, indent=1))
    print(f"trace and results.json in {work}")


if __name__ == "__main__":
    main()
