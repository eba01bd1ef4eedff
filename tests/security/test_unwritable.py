"""Threat: an output that cannot be written ends in a traceback (exit 3) and leaves a ``.tmp`` file behind.

Every output option (``--output``, ``--md``, ``--json``, ``--junit``, ``--out``) is written through a
temporary file with an unpredictable name beside the destination, renamed over it; a failure removes the
temporary file and is exit 2 naming the path. The tests run as root too, so "unwritable" is made with
paths that no permission bit can fix: below a regular file, or onto a folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main

REPO = Path(__file__).resolve().parents[2]
FIXED = REPO / "sample_traces" / "engine_b64_fixed"
STEP = f"{REPO / 'tests' / 'profile_programs' / 'sampler_step.py'}:step"


def unwritable(tmp_path: Path, kind: str) -> Path:
    if kind == "below a file":
        (tmp_path / "afile").write_text("mine\n")
        return tmp_path / "afile" / "report"
    (tmp_path / "afolder").mkdir(exist_ok=True)
    return tmp_path / "afolder"


def leftovers(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp") or ".partial-" in p.name)


@pytest.mark.parametrize("kind", ["below a file", "a folder"])
@pytest.mark.parametrize("option", [["--format", "json", "--output"], ["--md"], ["--json"], ["--junit"]])
def test_gate_outputs(tmp_path: Path, option: list[str], kind: str) -> None:
    target = unwritable(tmp_path, kind)
    r = CliRunner().invoke(main, ["gate", str(FIXED), str(FIXED), *option, str(target)])
    assert r.exit_code == 2, r.output
    assert "cannot write it" in r.stderr and str(target) in r.stderr and "Traceback" not in r.stderr
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command", [["diagnose", str(FIXED), "--format", "json"], ["stats", str(FIXED), "--format", "csv"],
                                     ["rules", "--format", "json"]])
def test_other_commands_output(tmp_path: Path, command: list[str]) -> None:
    target = unwritable(tmp_path, "below a file")
    r = CliRunner().invoke(main, [*command, "--output", str(target)])
    assert r.exit_code == 2 and "cannot write it" in r.stderr, r.output
    assert leftovers(tmp_path) == []


def test_profile_out_below_a_file(tmp_path: Path) -> None:
    target = unwritable(tmp_path, "below a file") / "run"
    r = CliRunner().invoke(main, ["profile", STEP, "--steps", "1", "--warmup", "0", "--out", str(target)])
    assert r.exit_code == 2 and "cannot create it" in r.stderr, r.output
    assert leftovers(tmp_path) == []


def test_verify_out_below_a_file(tmp_path: Path) -> None:
    target = unwritable(tmp_path, "below a file") / "verify"
    r = CliRunner().invoke(main, ["verify", "--fix", "bf16-greedy-sampler", "--out", str(target)])
    assert r.exit_code == 2 and "cannot create it" in r.stderr, r.output


def test_a_written_output_replaces_the_old_one_whole(tmp_path: Path) -> None:
    target = tmp_path / "gate.json"
    target.write_text("old\n")
    r = CliRunner().invoke(main, ["gate", str(FIXED), str(FIXED), "--format", "json", "-o", str(target)])
    assert r.exit_code == 0 and target.read_text().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate.json"]
