"""Which capture a folder means: every command reads the same one, says which in its first line, and
refuses a folder of several captures that has no baseline, naming them (real captures, copied into
the layouts that hold several: an xprof log directory with two runs, a verify --out folder)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.core.outdir import write_marker

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
ORIGINAL = SAMPLES / "engine_b64_original_a"
FIXED = SAMPLES / "engine_b64_fixed"
SEED = SAMPLES / "seed_v5e_b512"


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"GITHUB_ACTIONS": ""}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _run_folder(capture: Path) -> Path:
    (run,) = {p.parent for p in capture.glob("plugins/profile/*/*.xplane.pb")}
    return run


def _rel(path: Path) -> str:
    """As the commands write a path: relative to the working folder inside it, else as it is."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An xprof/TensorBoard log directory holding two capture sessions (two runs)."""
    root = tmp_path_factory.mktemp("logs")
    for capture in (ORIGINAL, FIXED):
        run = _run_folder(capture)
        shutil.copytree(run, root / "plugins" / "profile" / f"{run.name}_{capture.name}")
    return root


def test_a_log_directory_with_two_runs_is_refused_naming_both(logdir: Path) -> None:
    runs = sorted((logdir / "plugins" / "profile").iterdir())
    for command in (["stats"], ["diagnose", "--no-what-if"], ["gate", str(FIXED)]):
        code, out, err = _run(*command, str(logdir))
        assert code == 2 and not out, (command, err)
        assert f"holds 2 captures ({_rel(runs[0])}, {_rel(runs[1])})" in err, (command, err)
        assert "pass the one to read" in err
    # One of them, named: read, and said so first.
    code, _, err = _run("stats", str(runs[0]), "--top", "1")
    (xplane,) = runs[0].glob("*.xplane.pb")
    assert code == 0 and err.splitlines()[0] == f"capture: {_rel(xplane)}"


def test_a_verify_folder_is_read_as_its_baseline(tmp_path: Path) -> None:
    out = tmp_path / "verify-out"
    out.mkdir()
    write_marker(out, "verify")
    shutil.copytree(ORIGINAL, out / "baseline-run")
    shutil.copytree(FIXED, out / "treatment-run")
    (xplane,) = (out / "baseline-run").glob("plugins/profile/*/*.xplane.pb")
    line = f"capture: {_rel(xplane)} (the baseline capture of the verify folder {_rel(out)})"
    code, stdout, err = _run("diagnose", str(out), "--no-what-if", "--format", "json")
    assert code == 0 and err.splitlines()[0] == line
    doc = json.loads(stdout)
    assert doc["capture"] == {"files": [_rel(xplane)], "via": line.split(" (", 1)[1][:-1]}
    # The baseline's findings (the fixed side has none of them).
    assert {"HD002", "HD003"} <= {f["code"] for f in doc["findings"]}
    code, stdout, err = _run("stats", str(out), "--format", "json")
    assert code == 0 and err.splitlines()[0] == line and json.loads(stdout)["capture"] == [_rel(xplane)]
    # Without its baseline the folder names what it holds and reads neither side.
    shutil.rmtree(out / "baseline-run")
    code, _, err = _run("diagnose", str(out), "--no-what-if")
    treatment = _run_folder(out / "treatment-run")
    assert code == 2 and f"holds 1 capture ({_rel(treatment)}), none of them its baseline (baseline-run/ is missing)" in err


def test_stats_and_diagnose_accept_the_same_export_folder() -> None:
    line = f"capture: {_rel(SEED / 'opstats.json')} (with 2 HLO module files)"
    code, stdout, err = _run("stats", str(SEED), "--format", "json")
    assert code == 0 and err.splitlines()[0] == line
    doc = json.loads(stdout)
    assert doc["capture"] == [_rel(SEED / "opstats.json")] and doc["num_steps"] == 100
    code, _, err = _run("diagnose", str(SEED), "--brief")
    assert code == 0 and err.splitlines()[0] == line
    assert "3 findings: ~3.1 ms of ~26.5 ms per step (~12%) is recoverable" in err


def test_gate_names_both_captures_first() -> None:
    code, stdout, err = _run("gate", str(FIXED), str(ORIGINAL), "--top", "0", "--format", "json")
    lines = err.splitlines()
    base, cand = (next(_run_folder(c).glob("*.xplane.pb")) for c in (FIXED, ORIGINAL))
    assert lines[:2] == [f"baseline capture: {_rel(base)}", f"candidate capture: {_rel(cand)}"]
    doc = json.loads(stdout)
    assert doc["baseline"]["capture"] == [_rel(base)] and doc["candidate"]["capture"] == [_rel(cand)]
    assert code == 1  # the candidate brings the copy and the convert program back


def test_a_verify_folders_measurements_are_kept_with_its_baseline(tmp_path: Path) -> None:
    """The measurement store of a folder read as its baseline is the baseline's run folder, where
    ``doctor`` keeps its own and a diagnosis of the profile looks; a plain run or a file is itself."""
    from hlo_doctor.lint.store import store_capture

    out = tmp_path / "verify-out"
    out.mkdir()
    write_marker(out, "verify")
    shutil.copytree(ORIGINAL, out / "baseline-run")
    shutil.copytree(FIXED, out / "treatment-run")
    assert store_capture(out) == out / "baseline-run"
    assert store_capture(out / "baseline-run") == out / "baseline-run"
    assert store_capture(ORIGINAL) == ORIGINAL
    (xplane,) = ORIGINAL.glob("plugins/profile/*/*.xplane.pb")
    assert store_capture(xplane) == xplane
    shutil.rmtree(out / "baseline-run")  # no baseline: the folder is refused where it is read; the store is its own
    assert store_capture(out) == out
