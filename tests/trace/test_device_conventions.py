"""Device traces as libtpu writes them (ids, metadata by id, device clock, occurrences, cores), and
ones that break the conventions: exit 2 with one line, or a warning in the table's header; never an
internal error. Built with the generated XSpace schema (field names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.opstats import from_json, load_opstats, to_csv, to_json
from hlo_doctor.trace import program_id_of, read_trace
from hlo_doctor.trace import xplane_pb2 as xp

BIG_ID = 12190760917235803885  # above 2**63, as libtpu writes them


class _Plane:
    """One XPlane: stat metadata made on first use, event metadata always new (keyed by id)."""

    def __init__(self, space: Any, name: str) -> None:
        self.plane = space.planes.add(id=len(space.planes), name=name)
        self.stat_ids: dict[str, int] = {}
        self.lines: dict[str, Any] = {}

    def stat(self, target: Any, name: str, value: object) -> None:
        sid = self.stat_ids.setdefault(name, len(self.stat_ids) + 1)
        meta = self.plane.stat_metadata[sid]
        meta.id, meta.name = sid, name
        stat = target.add(metadata_id=sid)
        if isinstance(value, float):
            stat.double_value = value
        elif isinstance(value, int):
            if value >= 1 << 63:
                stat.uint64_value = value
            else:
                stat.int64_value = value
        elif isinstance(value, bytes):
            stat.bytes_value = value
        else:
            stat.str_value = str(value)

    def metadata(self, name: str, display: str = "", **stats: object) -> int:
        mid = len(self.plane.event_metadata) + 1
        meta = self.plane.event_metadata[mid]
        meta.id, meta.name, meta.display_name = mid, name, display
        for key, value in stats.items():
            self.stat(meta.stats, key, value)
        return mid

    def event(self, line: str, mid: int, start_us: float, dur_us: float, **stats: object) -> None:
        ln = self.lines.get(line)
        if ln is None:
            ln = self.lines[line] = self.plane.lines.add(id=len(self.lines) + 1, name=line, timestamp_ns=1000)
        ev = ln.events.add(metadata_id=mid, offset_ps=int(start_us * 1e6), duration_ps=int(dur_us * 1e6))
        for key, value in stats.items():
            self.stat(ev.stats, key, value)


def _space(modules: dict[int, str]) -> tuple[Any, _Plane]:
    space = xp.XSpace()
    meta = _Plane(space, "/host:metadata")
    for pid, name in modules.items():
        meta.metadata(f"{name}({pid})", program_id=pid)
    return space, meta


def _tpu(space: Any, ordinal: int = 0) -> _Plane:
    plane = _Plane(space, f"/device:TPU:{ordinal}")
    plane.stat(plane.plane.stats, "device_type_string", "TPU v5 lite")
    return plane


def _write(tmp_path: Path, space: Any) -> Path:
    path = tmp_path / "host0.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return path


def _two_steps(tpu: _Plane, ops: list[int]) -> None:
    for step in range(2):
        tpu.event("Steps", tpu.metadata(str(step)), step * 100.0, 100.0, group_id=step)
        for k, mid in enumerate(ops):
            tpu.event("XLA Ops", mid, step * 100.0 + 10.0 * k, 5.0)


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_program_id_of() -> None:
    assert program_id_of(BIG_ID) == BIG_ID
    assert program_id_of(BIG_ID - (1 << 64)) == BIG_ID  # an int64 holding the uint64's bits
    assert program_id_of(str(BIG_ID)) == BIG_ID
    for bad in (-1, 1 << 64, 1.5, "abc", b"12", None, True):
        assert program_id_of(bad) is None


def test_uint64_ids_survive_table_json_and_csv(tmp_path: Path) -> None:
    space, _ = _space({BIG_ID: "jit_f"})
    tpu = _tpu(space)
    _two_steps(tpu, [tpu.metadata("%copy.1 = f32[8]{0} copy(f32[8]{0} %p)", "copy.1", program_id=BIG_ID)])
    stats = load_opstats(_write(tmp_path, space))
    row = stats.table.iloc[0]
    assert type(row["program_id"]) is int and row["program_id"] == BIG_ID
    assert row["module"] == "jit_f"  # named from the program id through the metadata plane
    assert stats.step_source == "device-steps" and stats.num_steps == 2
    assert row["runs_per_step"] == 1.0 and stats.num_devices == 1
    again = from_json(to_json(stats))
    assert list(again.table["program_id"]) == [BIG_ID]
    assert list(again.per_step["program_id"]) == [BIG_ID, BIG_ID]
    assert f",{BIG_ID}," in to_csv(stats.table)
    assert stats.table["canonical_key"].iloc[0] == "jit_f|copy|f32[8]"


def test_program_id_in_no_module_is_a_warning(tmp_path: Path) -> None:
    space, _ = _space({7: "jit_other"})
    tpu = _tpu(space)
    _two_steps(tpu, [tpu.metadata("%add.1 = f32[8]{0} add(f32[8]{0} %a, f32[8]{0} %b)", "add.1",
                                  program_id=BIG_ID, hlo_module="jit_f")])
    stats = load_opstats(_write(tmp_path, space))
    assert any(f"program ids in no module of the metadata plane: {BIG_ID}" in w for w in stats.warnings)
    result = _cli("stats", str(tmp_path))
    assert result.exit_code == 0 and "no module of the metadata plane" in result.output


def test_metadata_without_a_name_is_a_warning(tmp_path: Path) -> None:
    space, _ = _space({BIG_ID: "jit_f"})
    tpu = _tpu(space)
    _two_steps(tpu, [tpu.metadata("", program_id=BIG_ID)])
    tpu.event("XLA Ops", 999, 50.0, 1.0)  # an id that is in no metadata at all
    stats = load_opstats(_write(tmp_path, space))
    assert set(stats.table["op"]) == {"<metadata 1>", "<metadata 999>"}
    assert any("event metadata 1 has no name" in w for w in stats.warnings)
    assert any("event metadata 999 is not in the plane" in w for w in stats.warnings)


@pytest.mark.parametrize("bad", [1.5, "abc", -1])
def test_program_id_that_is_not_an_id_is_a_warning(tmp_path: Path, bad: object) -> None:
    space, _ = _space({BIG_ID: "jit_f"})
    tpu = _tpu(space)
    _two_steps(tpu, [tpu.metadata("%neg.1 = f32[8]{0} negate(f32[8]{0} %a)", "neg.1", program_id=bad)])
    stats = load_opstats(_write(tmp_path, space))
    assert stats.table["program_id"].iloc[0] is None
    assert any("not a valid id" in w for w in stats.warnings)
    for command in ("stats", "diagnose"):
        assert _cli(command, str(tmp_path)).exit_code in (0, 1)


def test_plane_without_op_lines(tmp_path: Path) -> None:
    space, _ = _space({BIG_ID: "jit_f"})
    tpu = _tpu(space, 0)
    _two_steps(tpu, [tpu.metadata("%neg.1 = f32[8]{0} negate(f32[8]{0} %a)", "neg.1", program_id=BIG_ID)])
    idle = _tpu(space, 1)
    idle.event("Steps", idle.metadata("0"), 0.0, 100.0)
    trace = read_trace([_write(tmp_path, space)])
    assert any("no op events on /device:TPU:1" in w for w in trace.warnings)
    assert trace.num_devices == 1

    only_idle, _ = _space({BIG_ID: "jit_f"})
    _tpu(only_idle).event("Steps", 1, 0.0, 100.0)
    (tmp_path / "idle").mkdir()
    result = _cli("stats", str(_write(tmp_path / "idle", only_idle)))
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "no HLO op events" in result.output


def test_conventions_metadata_by_id_device_clock_occurrences_and_cores(tmp_path: Path) -> None:
    other = BIG_ID + 1
    space, _ = _space({BIG_ID: "jit_f", other: "jit_f"})
    text = "%copy.1 = f32[8]{0} copy(f32[8]{0} %p)"
    for ordinal in (0, 1):
        tpu = _tpu(space, ordinal)
        # The same op text under two programs (a recompile): two metadata, two rows.
        first = tpu.metadata(text, "copy.1", program_id=BIG_ID)
        second = tpu.metadata(text, "copy.1", program_id=other)
        for step in range(2):
            tpu.event("Steps", tpu.metadata(str(step)), step * 100.0, 100.0, group_id=step)
            # The event's own times are off; the device clock stats are right.
            tpu.event("XLA Ops", first, step * 100.0 + 50.0, 99.0,
                      device_offset_ps=int((step * 100.0 + 1.0) * 1e6), device_duration_ps=int(4.0 * 1e6))
        ln = tpu.lines["XLA Ops"]
        ln.events.add(metadata_id=second, num_occurrences=3, duration_ps=int(6.0 * 1e6))  # aggregated
    stats = load_opstats(_write(tmp_path, space))
    table = stats.table.set_index("program_id")
    assert stats.num_devices == 2 and stats.num_steps == 2 and stats.step_time_us == pytest.approx(100.0)
    assert table.loc[BIG_ID, "occurrences"] == 4 and table.loc[BIG_ID, "devices"] == 2
    assert table.loc[BIG_ID, "total_time_us"] == pytest.approx(16.0)  # 4 x 4 us, device clock
    assert table.loc[BIG_ID, "runs_per_step"] == 1.0  # per device per step: what HD003 divides by
    assert table.loc[other, "occurrences"] == 6 and table.loc[other, "total_time_us"] == pytest.approx(12.0)


def test_h200_capture_table() -> None:
    """The real H200 capture (jax 0.11.2, CUPTI): device kind, step time and the sampler's tail."""
    run = Path(__file__).resolve().parents[2] / "sample_traces" / "gpu_h200_original"
    stats = load_opstats(run)
    assert stats.backend == "gpu" and stats.device_kind == "NVIDIA H200" and stats.num_devices == 1
    assert stats.num_steps == 5 and stats.step_time_us == pytest.approx(1884.2, abs=0.1)
    table = stats.table.set_index("op")
    assert table.loc["copy.1", "time_per_step_us"] == pytest.approx(30.0, abs=0.1)
    assert table.loc["copy.1", "module"] == "jit_sample" and table.loc["copy.1", "category"] == "copy"
    assert table.loc["copy.1", "shape"] == "f32[64,256000]{1,0}"
    assert table.loc["wrapped_convert", "time_per_step_us"] == pytest.approx(23.4, abs=0.1)
    assert table.loc["wrapped_convert", "runs_per_step"] == 1.0
    assert table.loc["input_reduce_fusion", "time_per_step_us"] == pytest.approx(21.9, abs=0.1)
    assert all(type(p) is int for p in stats.table["program_id"])
