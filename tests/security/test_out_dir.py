"""Threat: ``--out DIR`` deletes or overwrites a user's folder.

``profile`` replaces its run folder whole, ``doctor`` replaces its artifacts, ``verify`` cleans its
workspace inside ``--out``. Each does so only in a folder that holds hlo-doctor's own marker
(``.hlo-doctor-output``, written by the same command); a file name such as ``run.json`` or
``doctor.json`` proves nothing. Anything else that is not empty is exit 2, untouched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from threats import picture

from hlo_doctor.cli import main
from hlo_doctor.core.outdir import MARKER

REPO = Path(__file__).resolve().parents[2]
STEP = f"{REPO / 'tests' / 'profile_programs' / 'sampler_step.py'}:step"


def users_folder(path: Path, *decoys: str) -> Path:
    """A folder of the user's: a source tree, plus files named like hlo-doctor's outputs."""
    (path / "src").mkdir(parents=True)
    (path / "src" / "model.py").write_text("weights = 1\n")
    for name in decoys:
        (path / name).write_text("{}\n")
    return path


def profile(out: Path) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["profile", STEP, "--steps", "1", "--warmup", "0", "--out", str(out),
                                  "--format", "json"])
    return r.exit_code, r.stderr


@pytest.mark.parametrize("decoys", [("run.json",), ("run.json", "opstats.json"), ()])
def test_profile_never_replaces_a_folder_it_did_not_write(tmp_path: Path, decoys: tuple[str, ...]) -> None:
    out = users_folder(tmp_path / "work", *decoys)
    before = picture(out)
    code, err = profile(out)
    assert code == 2 and "hlo-doctor did not write it" in err
    assert picture(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["work"]  # no staged folder left beside it


def test_profile_replaces_its_own_earlier_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert profile(out)[0] == 0
    assert json.loads((out / MARKER).read_text()) == {"written_by": "hlo-doctor", "command": "profile"}
    (out / "stale.txt").write_text("from the first run\n")
    assert profile(out)[0] == 0
    assert not (out / "stale.txt").exists() and (out / "run.json").is_file()


def test_an_empty_folder_is_used(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    assert profile(out)[0] == 0 and (out / MARKER).is_file()


@pytest.mark.parametrize("marker", ["link", "folder", "foreign", "other-command"])
def test_a_forged_or_foreign_marker_is_refused(tmp_path: Path, marker: str) -> None:
    out = users_folder(tmp_path / "work")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"written_by": "hlo-doctor", "command": "profile"}))
    if marker == "link":
        os.symlink(outside, out / MARKER)
    elif marker == "folder":
        (out / MARKER).mkdir()
    elif marker == "foreign":
        (out / MARKER).write_text("anything\n")
    else:
        (out / MARKER).write_text(json.dumps({"written_by": "hlo-doctor", "command": "doctor"}))
    before = picture(out)
    code, err = profile(out)
    assert code == 2, err
    assert picture(out) == before


def test_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "file"
    out.write_text("mine\n")
    code, err = profile(out)
    assert code == 2 and out.read_text() == "mine\n"


@pytest.mark.parametrize("command", [["doctor"], ["verify", "--fix", "bf16-greedy-sampler"]])
def test_doctor_and_verify_refuse_a_users_folder_before_any_work(tmp_path: Path, command: list[str]) -> None:
    # doctor.json and a treatment-* folder are the names doctor and verify clean up: decoys here.
    out = users_folder(tmp_path / "work", "doctor.json", "verify.json")
    (out / "treatment-bf16-greedy-sampler-full").mkdir()
    (out / "treatment-bf16-greedy-sampler-full" / "keep.py").write_text("mine\n")
    before = picture(out)
    r = CliRunner().invoke(main, [*command, "--out", str(out)])
    assert r.exit_code == 2 and "hlo-doctor did not write it" in r.stderr, r.output
    assert picture(out) == before
