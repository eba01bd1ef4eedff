"""profile and stats through the CLI, on real JAX (XLA:CPU) captures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.opstats import COLUMN_NAMES, load_opstats

PROGRAMS = Path(__file__).parent.parent / "profile_programs"
SAMPLER = f"{PROGRAMS / 'sampler_step.py'}:step"


def _invoke(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def sampler_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One profile of the sampler program, shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("profile") / "run"
    result = _invoke("profile", SAMPLER, "--steps", "4", "--warmup", "2", "--out", str(out),
                     "--format", "json", "--per-step")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    return out, json.loads(result.stdout)  # type: ignore[attr-defined]


def test_profile_writes_a_run_directory_xprof_layout(sampler_run: tuple[Path, dict]) -> None:
    out, _ = sampler_run
    xplanes = list(out.glob("plugins/profile/*/*.xplane.pb"))
    assert len(xplanes) == 1
    run = json.loads((out / "run.json").read_text())
    assert next(iter(run)) == "schema" and run["schema"] == "hlo-doctor.run/1"
    assert run["target"] == SAMPLER
    assert run["backend"] == "cpu" and run["steps"] == 4 and run["warmup"] == 2
    assert {"jax", "jaxlib", "xprof"} <= set(run["versions"])
    assert (out / "opstats.csv").read_text().splitlines()[0].split(",") == list(COLUMN_NAMES)
    # Nothing staged is left beside the run directory.
    assert [p.name for p in out.parent.iterdir()] == ["run"]


def test_profile_shows_the_aliasing_copy_and_the_eager_convert(sampler_run: tuple[Path, dict]) -> None:
    _, doc = sampler_run
    assert doc["step_source"] == "annotation" and doc["num_steps"] == 4
    rows = doc["rows"]
    copy = [r for r in rows if r["category"] == "copy"]
    assert len(copy) == 1
    assert copy[0]["module"] == "jit_sample" and copy[0]["opcode"] == "copy"
    assert copy[0]["shape"] == "f32[32,2048]{1,0}"
    assert copy[0]["operand_shapes"] == "f32[32,2048]{1,0}"
    assert copy[0]["bytes_read"] == copy[0]["bytes_written"] == 32 * 2048 * 4
    assert copy[0]["occurrences"] == 4
    convert = [r for r in rows if r["category"] == "convert"]
    assert len(convert) == 1
    assert convert[0]["module"] == "jit_convert_element_type"
    assert convert[0]["shape"] == "f32[32,2048]{1,0}" and convert[0]["operand_shapes"] == "bf16[32,2048]{1,0}"
    assert convert[0]["program_id"] != copy[0]["program_id"]
    assert convert[0]["source"].endswith("sampler_step.py:19")
    argmax = [r for r in rows if r["category"] == "reduce"]
    assert argmax and argmax[0]["module"] == "jit_sample"
    assert argmax[0]["source"].endswith("sampler_step.py:15")
    # Ranks follow time per step; % of step follows the documented definition.
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    per_step = [r["time_per_step_us"] for r in rows]
    assert per_step == sorted(per_step, reverse=True)
    for r in rows:
        assert r["pct_of_step"] == pytest.approx(r["time_per_step_us"] / doc["step_time_us"] * 100)
        assert r["time_per_step_us"] == pytest.approx(r["total_time_us"] / doc["num_steps"])
    assert len(doc["step_times_us"]) == 4
    assert doc["step_time_us"] == pytest.approx(sum(doc["step_times_us"]) / 4)
    # Per-step samples: one per (step, op), and they add up to the totals.
    samples = doc["per_step"]["rows"]
    assert len(samples) == 4 * len(rows)
    for r in rows:
        mine = [s[5] for s in samples if s[4] == r["canonical_key"]]
        assert sum(mine) == pytest.approx(r["total_time_us"])


def test_stats_rebuilds_the_same_table(sampler_run: tuple[Path, dict], tmp_path: Path) -> None:
    out, doc = sampler_run
    result = _invoke("stats", str(out), "--format", "json")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    again = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert again["rows"] == doc["rows"]
    # A bare xplane copied elsewhere (no run.json beside it) gives the same rows.
    xplane = next(out.glob("plugins/profile/*/*.xplane.pb"))
    shutil.copy(xplane, tmp_path / "host0.xplane.pb")
    bare = load_opstats(tmp_path / "host0.xplane.pb")
    assert bare.run is None
    assert json.loads(bare.table.to_json(orient="records")) == json.loads(
        load_opstats(out).table.to_json(orient="records"))
    # And the JSON export alone is enough.
    from_export = load_opstats(out / "opstats.json")
    assert from_export.modules == () and from_export.num_steps == 4
    assert list(from_export.table["canonical_key"]) == [r["canonical_key"] for r in doc["rows"]]


def test_stats_table_and_group_by_shape(sampler_run: tuple[Path, dict]) -> None:
    out, _ = sampler_run
    result = _invoke("stats", str(out), "--top", "2")
    assert result.exit_code == 0
    text = result.stderr  # type: ignore[attr-defined]
    assert "steps from step annotations" in text and "% step" in text and "note:" not in text
    assert result.stdout == ""  # type: ignore[attr-defined]
    # The table to a file: plain text, every column.
    assert _invoke("stats", str(out), "--output", str(out.parent / "t.txt")).exit_code == 0  # type: ignore[attr-defined]
    assert "source" in (out.parent / "t.txt").read_text() and "\x1b[" not in (out.parent / "t.txt").read_text()
    written = out.parent / "table.csv"
    assert _invoke("stats", str(out), "--format", "csv", "--output", str(written)).exit_code == 0  # type: ignore[attr-defined]
    assert written.read_text().startswith("rank,program_id,module,op,")
    written.unlink()
    csv = _invoke("stats", str(out), "--group-by", "shape", "--format", "csv").stdout  # type: ignore[attr-defined]
    header = csv.splitlines()[0].split(",")
    assert header[:4] == ["rank", "opcode", "shape", "category"]
    assert any(line.startswith(("1,", "2,", "3,")) and "copy" in line for line in csv.splitlines())


def test_stats_reads_a_log_directory_with_several_hosts(sampler_run: tuple[Path, dict], tmp_path: Path) -> None:
    out, doc = sampler_run
    xplane = next(out.glob("plugins/profile/*/*.xplane.pb"))
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copy(xplane, run / "host-a.xplane.pb")
    shutil.copy(xplane, run / "host-b.xplane.pb")
    stats = load_opstats(tmp_path / "logs")
    copy = stats.table[stats.table["category"] == "copy"].iloc[0]
    single = next(r for r in doc["rows"] if r["category"] == "copy")
    # Two hosts ran the same op: twice the events, the same time per step (per device).
    assert copy["occurrences"] == 2 * single["occurrences"] and copy["devices"] == 2
    assert copy["time_per_step_us"] == pytest.approx(single["time_per_step_us"])
    assert stats.num_steps == 4 and len(stats.step_times_us) == 8


# ---------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, no traceback, no run directory left looking complete
# ---------------------------------------------------------------------------------------------

def _assert_one_line_error(result: object, *needles: str) -> None:
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    err = result.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("error:"), err
    for needle in needles:
        assert needle in err


def _assert_no_run_left(out: Path) -> None:
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_profile_target_that_raises(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = _invoke("profile", f"{PROGRAMS / 'raises_step.py'}:step", "--out", str(out), "--warmup", "1")
    _assert_one_line_error(result, "raises_step.py", "ValueError", "the model is not loaded")
    _assert_no_run_left(out)


def test_profile_target_that_does_not_import(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = _invoke("profile", f"{PROGRAMS / 'import_error.py'}:step", "--out", str(out))
    _assert_one_line_error(result, "import_error.py", "RuntimeError", "missing checkpoint")
    _assert_no_run_left(out)
    for target, needle in ((f"{PROGRAMS / 'nope.py'}:step", "does not exist"),
                           (f"{PROGRAMS / 'sampler_step.py'}:nope", "no function 'nope'"),
                           ("no_such_package_xyz.mod:step", "cannot be imported"),
                           ("just-a-name", "not FILE.py:FUNC")):
        _assert_one_line_error(_invoke("profile", target, "--out", str(out)), needle)
        _assert_no_run_left(out)


@pytest.mark.parametrize(("func", "needle"), [
    ("step", "no compiled JAX op ran in its 2 traced step(s) - profile a function that runs jitted"),
    ("step_none", "returned None in each of its 2 traced step(s), and no compiled JAX op ran inside them - "
                  "return the arrays the step computes"),
])
def test_profile_target_without_hlo_ops(tmp_path: Path, func: str, needle: str) -> None:
    # A process of its own: in this one, work that earlier tests dispatched asynchronously can still
    # be running on XLA's thread pool while the trace is on, and its ops would land in the capture.
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "hlo_doctor.cli", "profile", f"{PROGRAMS / 'no_ops_step.py'}:{func}",
                           "--out", str(out), "--steps", "2", "--warmup", "0"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    # Said of the target: not of the trace file in the staged folder, which is gone.
    assert ".partial-" not in errors[0] and "xplane.pb" not in errors[0], errors[0]
    _assert_no_run_left(out)


def test_profile_refuses_to_overwrite_a_foreign_directory(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = _invoke("profile", SAMPLER, "--out", str(out), "--steps", "1")
    _assert_one_line_error(result, "not an hlo-doctor run directory")
    assert (out / "notes.txt").read_text() == "keep me"


def test_stats_bad_inputs(sampler_run: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = sampler_run
    xplane = next(out.glob("plugins/profile/*/*.xplane.pb")).read_bytes()
    _assert_one_line_error(_invoke("stats", str(tmp_path / "missing")), "no such file or directory")
    (tmp_path / "notes.txt").write_text("hello")
    _assert_one_line_error(_invoke("stats", str(tmp_path / "notes.txt")), "not an .xplane.pb")
    (tmp_path / "text.xplane.pb").write_text("this is not a protobuf at all\n" * 10)
    _assert_one_line_error(_invoke("stats", str(tmp_path / "text.xplane.pb")), "not a readable xplane")
    (tmp_path / "cut.xplane.pb").write_bytes(xplane[: len(xplane) // 2])
    _assert_one_line_error(_invoke("stats", str(tmp_path / "cut.xplane.pb")), "cut.xplane.pb", "truncated")
    (tmp_path / "empty.xplane.pb").write_bytes(b"")
    _assert_one_line_error(_invoke("stats", str(tmp_path / "empty.xplane.pb")), "empty file")
    # A well-formed XSpace that holds no planes at all (field 4: one host name).
    (tmp_path / "noplanes.xplane.pb").write_bytes(b"\x22\x04host")
    _assert_one_line_error(_invoke("stats", str(tmp_path / "noplanes.xplane.pb")), "holds no planes")
    (tmp_path / "dir").mkdir()
    _assert_one_line_error(_invoke("stats", str(tmp_path / "dir")), "no trace inside (no .xplane.pb")
    (tmp_path / "bad.json").write_text("{}")
    _assert_one_line_error(_invoke("stats", str(tmp_path / "bad.json")), "not an hlo-doctor opstats export")


@pytest.mark.slow
def test_profile_engine(tmp_path: Path) -> None:
    """The default target: the bundled reference engine, small, through the CLI."""
    out = tmp_path / "engine"
    result = _invoke("profile", "--batch", "8", "--vocab", "1024", "--steps", "2", "--warmup", "1",
                     "--out", str(out), "--format", "json")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    doc = json.loads(result.stdout)  # type: ignore[attr-defined]
    run = json.loads((out / "run.json").read_text())
    assert run["target"] == "engine" and run["steps"] == 2
    assert run["config"]  # what the engine built, recorded after its warm-up
    # The menu stops at the batch's bucket (as verify's and doctor's do): 9 programs and the rng split.
    assert run["config"]["num_reqs_paddings"] == [8] and run["config"]["precompiled_programs"] == 10
    rows = doc["rows"]
    # The engine's sampling tail: the greedy sampler's aliasing copy of the f32 logits.
    assert any(r["category"] == "copy" and r["module"] == "jit_sample" and r["shape"].startswith("f32[")
               and ",1024]" in r["shape"] for r in rows)
    assert any(r["category"] == "matmul" for r in rows)
    bad = _invoke("profile", "--vocab", "0", "--out", str(tmp_path / "bad"))
    _assert_one_line_error(bad)
    _assert_no_run_left(tmp_path / "bad")
