"""Captures of several host files (a pod's log directory), built the way libtpu lays out a TPU trace.

- :func:`tpu_pod`: a few hosts of a few chips each, every host a little different (op times, a
  recompiled sampler on one host, an op of its own on another), the traces xprof's tests build
  (:mod:`xspace_builder`) with real modules compiled on CPU;
- :func:`large_tpu_host`: one host file of many MiB, its events written straight to the wire
  (``XLA Ops`` lines of hundreds of thousands of events: read in several chunks), for the tests
  that must catch a worker while it reads.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))

from xspace_builder import RealModule, SpaceBuilder, TpuCore, field, varint  # noqa: E402

from hlo_doctor.trace import xplane_pb2 as xp  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RUN = "2026_01_01_00_00_00"
LAYER_ID = 12190760917235803885
SAMPLER_IDS = (659683, 17293822569102704642)
STEP_NS = 400_000.0


def host_dir(root: Path) -> Path:
    """The run folder of a log directory, where the host files go."""
    return root / "plugins" / "profile" / RUN


def tpu_pod(root: Path, layer: RealModule, sampler: RealModule, hosts: int = 3, chips: int = 2,
            steps: int = 6) -> Path:
    """``hosts`` host files of ``chips`` TPU chips each, in ``root``'s newest run (see the docstring)."""
    for h in range(hosts):
        space = SpaceBuilder(f"tpu-host-{h}")
        space.add_module(layer, LAYER_ID)
        sampler_ids = SAMPLER_IDS if h == 1 else SAMPLER_IDS[:1]
        for pid in sampler_ids:
            space.add_module(sampler, pid)
        for chip in range(chips):
            core = TpuCore(space, chip)
            for s in range(steps):
                t = s * STEP_NS + chip * 700.0 + h * 1_300.0
                core.step(s, t, STEP_NS)
                ops = [(op.name, (12.0 + 3.0 * k + 0.7 * h + 0.3 * chip) * 1000) for k, op in enumerate(layer.ops)]
                if h == 2:
                    ops = ops[:-1]  # this host's layer leaves out its last op
                end = core.run(layer, LAYER_ID, t + 1_000.0, ops, run_id=s, device_clock_skew_ns=2_500.0)
                pid = sampler_ids[0] if s < steps // 2 else sampler_ids[-1]
                core.run(sampler, pid, end + 2_000.0, [(op.name, (5.0 + k) * 1000) for k, op in enumerate(sampler.ops)],
                         run_id=s, device_clock_skew_ns=2_500.0)
        space.write(root, RUN)
    return root


def cpu_pod(root: Path, hosts: int = 2) -> Path:
    """Real XLA:CPU captures of the reference engine as the host files of one log directory."""
    samples = [REPO / "sample_traces" / name for name in ("engine_b64_original_a", "engine_b64_original_b")]
    out = host_dir(root)
    out.mkdir(parents=True, exist_ok=True)
    for h in range(hosts):
        source = next(samples[h % len(samples)].glob("plugins/profile/*/*.xplane.pb"))
        shutil.copy(source, out / f"cpu-host-{h}.xplane.pb")
    return root


def large_tpu_host(path: Path, layer: RealModule, size_mb: float, chips: int = 2) -> Path:
    """One TPU host file of about ``size_mb`` MiB (``chips`` chips running ``layer`` step after step)."""
    ops_per_step = len(layer.ops)
    # About 90 bytes per op event (metadata id, offset and duration in ps, two device-clock stats).
    steps = int(size_mb * 2**20 / 90 / ops_per_step / chips) + 1
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        meta = xp.XPlane(id=0, name="/host:metadata")
        meta.stat_metadata[1].id, meta.stat_metadata[1].name = 1, "Hlo Proto"
        meta.stat_metadata[2].id, meta.stat_metadata[2].name = 2, "program_id"
        em = meta.event_metadata[1]
        em.id, em.name = 1, f"{layer.name}({LAYER_ID})"
        em.stats.add(metadata_id=1, bytes_value=layer.hlo_proto)
        em.stats.add(metadata_id=2, uint64_value=LAYER_ID)
        f.write(field(1, meta.SerializeToString()))
        for chip in range(chips):
            f.write(field(1, _large_plane(layer, chip, steps)))
    return path


def _large_plane(layer: RealModule, chip: int, steps: int) -> bytes:
    plane = xp.XPlane(id=chip + 1, name=f"/device:TPU:{chip}")
    names = ["device_type_string", "program_id", "symbol_id", "run_id", "group_id", "device_offset_ps",
             "device_duration_ps"]
    sid = {name: i for i, name in enumerate(names, start=1)}
    for name, i in sid.items():
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name
    plane.stats.add(metadata_id=sid["device_type_string"], str_value="TPU v5 lite")
    module_mid = 1
    plane.event_metadata[module_mid].id, plane.event_metadata[module_mid].name = module_mid, f"{layer.name}({LAYER_ID})"
    op_mids = []
    for k, op in enumerate(layer.ops, start=2):
        em = plane.event_metadata[k]
        em.id, em.name, em.display_name = k, op.text, op.name
        em.stats.add(metadata_id=sid["program_id"], uint64_value=LAYER_ID)
        em.stats.add(metadata_id=sid["symbol_id"], int64_value=k)
        op_mids.append(k)
    step_mid = len(op_mids) + 2
    plane.event_metadata[step_mid].id, plane.event_metadata[step_mid].name = step_mid, "step"

    def event(mid: int, offset_ps: int, duration_ps: int, extra: bytes = b"") -> bytes:
        stats = (field(4, b"\x08" + varint(sid["device_offset_ps"]) + b"\x20" + varint(offset_ps))
                 + field(4, b"\x08" + varint(sid["device_duration_ps"]) + b"\x20" + varint(duration_ps)))
        return field(4, b"\x08" + varint(mid) + b"\x10" + varint(offset_ps) + b"\x18" + varint(duration_ps)
                     + stats + extra)

    step_ps = 2_000_000_000
    steps_line, modules_line, ops_line = [], [], []
    for s in range(steps):
        t = s * step_ps + chip * 3_000_000
        steps_line.append(event(step_mid, t, step_ps, field(4, b"\x08" + varint(sid["group_id"]) + b"\x20" + varint(s))))
        start = t = t + 1_000_000
        for k, mid in enumerate(op_mids):
            duration = 3_000_000 + 91_000 * ((k * 7 + chip + s) % 23)
            ops_line.append(event(mid, t, duration))
            t += duration + 100_000
        modules_line.append(event(module_mid, start, t - start,
                                  field(4, b"\x08" + varint(sid["run_id"]) + b"\x20" + varint(s))))
    lines = b""
    for line_id, name, events in ((1, "Steps", steps_line), (2, "XLA Modules", modules_line), (3, "XLA Ops", ops_line)):
        head = xp.XLine(id=line_id, display_id=line_id, name=name, timestamp_ns=1_000_000).SerializeToString()
        lines += field(3, head + b"".join(events))
    # Lines first, then the metadata: the field order the profiler's own serializer writes.
    head = xp.XPlane(id=plane.id, name=plane.name).SerializeToString()
    rest = plane.SerializeToString()[len(head):]
    return head + lines + rest
