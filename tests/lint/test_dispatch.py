"""Host dispatch spans (``PjitFunction(<name>)``) read from an xplane's host planes."""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.lint.dispatch import read_host_dispatch
from hlo_doctor.trace import xplane_pb2 as xp


def _event(line: object, mid: int, start_us: float, dur_us: float) -> None:
    ev = line.events.add()  # type: ignore[attr-defined]
    ev.metadata_id = mid
    ev.offset_ps = round(start_us * 1e6)
    ev.duration_ps = round(dur_us * 1e6)


def _space(tmp_path: Path) -> Path:
    space = xp.XSpace()  # type: ignore[attr-defined]
    host = space.planes.add()
    host.name = "/host:CPU"
    for mid, name in ((1, "PjitFunction(convert_element_type)"), (2, "PjitFunction(sample)"), (3, "other")):
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
    main = host.lines.add()
    main.name = "python3"
    # Step 1: the convert (60 us) re-enters the fast path inside itself (a cache miss): counted once.
    _event(main, 1, 0, 60)
    _event(main, 1, 10, 20)
    _event(main, 3, 61, 5)
    _event(main, 2, 70, 100)
    # Step 2.
    _event(main, 1, 1000, 40)
    _event(main, 2, 1050, 80)
    device = space.planes.add()  # device planes are not host dispatch, whatever their events say
    device.name = "/device:GPU:0"
    device.event_metadata[1].id = 1
    device.event_metadata[1].name = "PjitFunction(convert_element_type)"
    line = device.lines.add()
    _event(line, 1, 0, 999)
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return path


def test_outermost_spans_per_program(tmp_path: Path) -> None:
    got = {d.module: (d.calls, round(d.total_us, 3), round(d.per_call_us, 3))
           for d in read_host_dispatch([_space(tmp_path)])}
    assert got == {"jit_convert_element_type": (2, 100.0, 50.0), "jit_sample": (2, 180.0, 90.0)}


def test_unreadable_file_gives_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\xff\xff\xff")
    assert read_host_dispatch([bad]) == ()
