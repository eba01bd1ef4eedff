"""The compiled walk of a plane's fields (``_xwire.walk_fields``) against the Python walk it replaces.

The judge is the reader's field-by-field walk (``_Source.field_at``, which the protobuf runtime's
own parse of the same bytes backs: a plane the walk accepts parses as ``XPlane``). Planes are written
by the protobuf serializer (tens of thousands of metadata entries, lines between them, every wire
type), then cut at random places and corrupted at random bytes: the compiled walk must list the same
fields, or leave the same field to the Python walk, which refuses it with the same message. Windows
of a few bytes make every field's head fall across a window's end somewhere.
"""

from __future__ import annotations

import io
import random

import pytest

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace import cwire, source
from hlo_doctor.trace import xplane_pb2 as xp

pytestmark = pytest.mark.skipif(not cwire.COMPILED, reason="the compiled reader is not built in this install")


def _plane(seed: int, entries: int = 300) -> bytes:
    rng = random.Random(seed)
    plane = xp.XPlane(id=rng.randrange(1 << 40), name=f"/device:TPU:{seed}")
    for k in range(1, entries):
        meta = plane.event_metadata[k]
        meta.id, meta.name = k, "op" * rng.randrange(0, 40)
        stat = meta.stats.add(metadata_id=1)
        kind = rng.randrange(4)
        if kind == 0:
            stat.int64_value = rng.randrange(-(1 << 62), 1 << 62)
        elif kind == 1:
            stat.double_value = rng.random()
        elif kind == 2:
            stat.str_value = "s" * rng.randrange(200)
        else:
            stat.uint64_value = rng.randrange(1 << 64)
        if k % 97 == 0:
            line = plane.lines.add(id=k, name=f"line {k}", timestamp_ns=rng.randrange(1 << 50))
            for _ in range(rng.randrange(50)):
                line.events.add(metadata_id=k, offset_ps=rng.randrange(1 << 40), duration_ps=rng.randrange(1 << 30))
    plane.stat_metadata[1].name = "group_id"
    plane.stats.add(metadata_id=1, double_value=1.5)
    return plane.SerializeToString()


def _python_walk(data: bytes) -> list[tuple[int, int, int, int]] | str:
    src = source.Source(io.BytesIO(data), len(data), "x.xplane.pb")
    out, pos = [], 0
    try:
        while pos < len(data):
            f = src.field_at(pos, len(data))
            out.append((f.number, f.start, f.value, f.end))
            pos = f.end
    except InputError as exc:
        return exc.what
    return out


def _compiled_walk(data: bytes) -> list[tuple[int, int, int, int]] | str:
    src = source.Source(io.BytesIO(data), len(data), "x.xplane.pb")
    try:
        return list(src.fields(0, len(data)))
    except InputError as exc:
        return exc.what


@pytest.mark.parametrize("window", [16, 100, 4096, 1 << 20])
def test_serialized_planes_walk_alike(monkeypatch: pytest.MonkeyPatch, window: int) -> None:
    monkeypatch.setattr(source, "WINDOW", window)
    for seed in range(4):
        data = _plane(seed)
        got = _compiled_walk(data)
        assert got == _python_walk(data)
        assert isinstance(got, list) and len(got) > 300
        assert xp.XPlane.FromString(data).name == f"/device:TPU:{seed}"


@pytest.mark.parametrize("seed", range(6))
def test_cut_and_corrupted_planes_walk_alike_or_are_refused_alike(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setattr(source, "WINDOW", 257)
    rng = random.Random(seed)
    data = _plane(100 + seed, entries=120)
    for _ in range(150):
        cut = bytearray(data[:rng.randrange(1, len(data) + 1)])
        for _ in range(rng.randrange(4)):
            cut[rng.randrange(len(cut))] = rng.choice((0x00, 0x07, 0x0B, 0x80, 0xFF, rng.randrange(256)))
        assert _compiled_walk(bytes(cut)) == _python_walk(bytes(cut))


def test_varints_of_ten_bytes_and_more_than_64_bits() -> None:
    """A tag or length written in ten bytes is read; one whose value needs a 65th bit is refused by
    the Python walk, so the compiled walk leaves it there."""
    ten = bytes([0x8A, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00])  # field 1, wire 2
    ok = ten + b"\x03abc"
    assert _compiled_walk(ok) == _python_walk(ok) == [(1, 0, 11, 14)]
    wide = bytes([0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02])  # a varint above 2**64
    assert _compiled_walk(wide) == _python_walk(wide)
