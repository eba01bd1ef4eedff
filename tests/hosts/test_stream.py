"""The streamed reader (a plane and a chunk of events at a time) against protobuf parsing the whole
file, on the field orders writers use, and on files cut short."""

from __future__ import annotations

from pathlib import Path

import pytest
from pods import host_dir
from xspace_builder import field

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace import xplane_pb2 as xp
from hlo_doctor.trace import xspace
from hlo_doctor.trace.stream import CHUNK_BYTES, XSpaceFile


def _whole(data: bytes) -> list[tuple[object, ...]]:
    out = []
    for raw in xspace.split_planes(data, "x"):
        plane = xspace.parse_plane(raw, "x")
        meta = sorted((e.key, e.value.SerializeToString()) for e in plane.event_metadata)
        for line in plane.lines:
            events = [e.SerializeToString() for e in line.events]
            out.append((plane.name, meta, line.id, line.name, line.display_name, line.timestamp_ns, events))
    return out


def _streamed(source: Path | bytes) -> list[tuple[object, ...]]:
    out = []
    with XSpaceFile(source, str(source) if isinstance(source, Path) else "x") as space:
        for ref in space.planes:
            plane = space.plane(ref)
            meta = sorted((e.key, e.value.SerializeToString()) for e in plane.event_metadata)
            for line in plane.lines:
                events = [e.SerializeToString() for e in line.events]
                out.append((plane.name, meta, line.id, line.name, line.display_name, line.timestamp_ns, events))
    return out


def test_large_lines_are_read_in_chunks_as_protobuf_reads_them_whole(large_logdir: Path) -> None:
    host = host_dir(large_logdir) / "tpu-host-9.xplane.pb"
    with XSpaceFile(host) as space:
        lengths = [line._length for ref in space.planes for line in space.plane(ref).lines]
    assert max(lengths) > CHUNK_BYTES  # more than one chunk per XLA Ops line
    assert _streamed(host) == _whole(host.read_bytes())


def test_field_orders_writers_use(layer: object) -> None:
    line = xp.XLine(id=7, name="XLA Ops", display_name="ops", display_id=3, timestamp_ns=5, duration_ps=9)
    for k in range(3):
        line.events.add(metadata_id=k + 1, offset_ps=10 * k, duration_ps=4)
    plane = xp.XPlane(id=1, name="/device:TPU:0")
    plane.event_metadata[1].name = "%copy.1 = f32[8]{0} copy(f32[8]{0} %p)"
    head = xp.XPlane(id=1, name="/device:TPU:0").SerializeToString()
    rest = plane.SerializeToString()[len(head):]
    lines = field(3, line.SerializeToString())
    canonical = field(1, head + lines + rest)
    metadata_first = field(1, head + rest + lines)  # as benchmarks/bench_device_trace.py writes planes
    # Events split by another field: the line is read whole.
    events = [field(4, e.SerializeToString()) for e in line.events]
    split_line = xp.XLine(id=7, name="XLA Ops").SerializeToString() + events[0] + field(11, "ops") + b"".join(events[1:])
    interleaved = field(1, head + field(3, split_line) + rest)
    for data in (canonical, metadata_first, interleaved):
        assert _streamed(data) == _whole(data)


@pytest.mark.parametrize("cut", [0.999, 0.5, 0.01])
def test_a_file_cut_short_is_named(tpu_logdir: Path, tmp_path: Path, cut: float) -> None:
    data = next(host_dir(tpu_logdir).glob("*.xplane.pb")).read_bytes()
    short = tmp_path / "short.xplane.pb"
    short.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(InputError, match=r"short\.xplane\.pb: not a readable xplane \(truncated or corrupt"):
        _streamed(short)
    short.write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        _streamed(short)
