"""The op table's rows before the frame (:class:`~hlo_doctor.opstats.schema.TableLater`): an export
of the table reads the rows themselves, so ``stats --format json`` loads no pandas, and what it
writes is what the built frame gives (the frame's typing is the judge: pandas's own ``astype``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hlo_doctor.core.errors import InputError
from hlo_doctor.hosts import PodOptions, read_capture
from hlo_doctor.opstats import to_json
from hlo_doctor.opstats.schema import COLUMN_NAMES, OpStats, TableLater
from hlo_doctor.opstats.validate import check_opstats

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.mark.parametrize("capture", ["gpu_h200_original", "tpu_v5e_original", "engine_b64_original_a",
                                     "tpu_v5e_seed_b512"])
def test_the_rows_export_as_the_built_frame_does(capture: str) -> None:
    """Real captures (H200, TPU v5e, XLA:CPU): the JSON export written from the rows is byte for byte
    the one written from the frame pandas types, and the records equal ``to_dict(orient="records")``."""
    stats, _ = read_capture(SAMPLES / capture, PodOptions())
    assert isinstance(stats.table_data, TableLater)
    from_rows, records = to_json(stats, per_step=False), stats.records()
    assert [list(r) for r in records] == [list(COLUMN_NAMES)] * len(records)
    frame = stats.table  # built now, and kept
    assert not isinstance(stats.table_data, TableLater) and stats.table is frame
    assert to_json(stats, per_step=False) == from_rows
    assert _same(stats.records(), records)


def _same(a: list[dict[str, object]], b: list[dict[str, object]]) -> bool:
    """Equal, NaN equal to NaN, and of the same Python types."""
    def key(v: object) -> object:
        return ("nan",) if isinstance(v, float) and v != v else (type(v).__name__, v)
    return [[key(v) for v in r.values()] for r in a] == [[key(v) for v in r.values()] for r in b]


def _bad_stats(**changes: object) -> tuple[OpStats, OpStats]:
    stats, _ = read_capture(SAMPLES / "gpu_h200_original", PodOptions())
    assert isinstance(stats.table_data, TableLater)
    rows = [dict(r) for r in stats.table_data.rows]
    rows[1].update(changes)
    import dataclasses
    later = dataclasses.replace(stats, table_data=TableLater(rows))
    framed = dataclasses.replace(stats, table_data=TableLater([dict(r) for r in rows])())
    return later, framed


@pytest.mark.parametrize("changes", [{"total_time_us": -1.0}, {"self_time_us": float("inf")},
                                     {"occurrences": -3}, {"module": None}, {"op": None},
                                     {"avg_time_us": float("nan")}, {"program_id": None, "flops_per_run": None}])
def test_rows_are_checked_as_the_frame_is(changes: dict[str, object]) -> None:
    """``check_opstats`` on rows not yet a frame says what it says of the frame: the same error, or
    none (a missing program id or roofline value is unknown, not bad)."""
    later, framed = _bad_stats(**changes)

    def outcome(stats: OpStats) -> str:
        try:
            check_opstats(stats, "x.xplane.pb")
        except InputError as exc:
            return str(exc)
        return "ok"
    got = outcome(later)
    assert got == outcome(framed)
    assert isinstance(later.table_data, TableLater)  # (checking the rows built no frame)
    assert (got == "ok") == ("program_id" in changes)


@pytest.mark.parametrize("capture", ["gpu_h200_original", "tpu_v5e_original", "engine_b64_original_a"])
def test_the_tables_people_read_from_the_rows_are_the_frames(capture: str) -> None:
    """The terminal table (every column) and the Markdown table of real captures, written from the
    rows, are the ones written once the frame is built."""
    from hlo_doctor.cli.common import plain_text
    from hlo_doctor.cli.profile import _table
    from hlo_doctor.render.opstats import to_markdown

    stats, _ = read_capture(SAMPLES / capture, PodOptions())
    assert isinstance(stats.table_data, TableLater)
    from_rows = (plain_text(_table(stats, 5, "op", wide=True)), to_markdown(stats, 5))
    assert isinstance(stats.table_data, TableLater)  # (neither built the frame)
    assert len(stats.table) > 5
    assert (plain_text(_table(stats, 5, "op", wide=True)), to_markdown(stats, 5)) == from_rows


def test_stats_json_loads_no_pandas(tmp_path: Path) -> None:
    """In a fresh process, ``hlo-doctor stats CAPTURE`` of a real TPU capture writes its JSON document,
    its table for people and its Markdown table without loading pandas (0.25 s of its imports);
    ``--format csv`` and ``--group-by shape`` load it."""
    code = f"""
import sys
from hlo_doctor.cli import main
fmt, group = sys.argv[1:3]
try:
    main(["stats", {str(SAMPLES / 'tpu_v5e_original')!r}, "--format", fmt, "--group-by", group,
          "-o", {str(tmp_path)!r} + "/out-" + group + "." + fmt])
except SystemExit as exc:
    assert not exc.code, exc.code
print("pandas", "pandas.core.frame" in sys.modules)
"""
    for fmt, group, pandas in (("json", "op", False), ("table", "op", False), ("markdown", "op", False),
                               ("csv", "op", True), ("table", "shape", True)):
        out = subprocess.run([sys.executable, "-c", code, fmt, group], capture_output=True, text=True, timeout=300,
                             check=True)
        assert out.stdout.strip().splitlines()[-1] == f"pandas {pandas}", (fmt, group, out.stdout + out.stderr)
    assert '"rows":' in (tmp_path / "out-op.json").read_text()
    assert "convert_element_type" in (tmp_path / "out-op.table").read_text()
