"""Threat: a ``pyproject.toml`` planted in a parent folder (a world-writable ``/tmp``, a shared home) sets the
gate's policy, e.g. ``fail_on_new = []`` so that a new aliasing copy passes, and no report says so.

The lookup walks up from the current folder to the repository root (the nearest folder with ``.git``)
and no further; outside a repository only the current folder counts. Every report format names the
policy it used: the file, flags, or ``defaults``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.cli.config import find_pyproject
from hlo_doctor.gate.policy import find_policy_file

REPO = Path(__file__).resolve().parents[2]
FIXED = REPO / "sample_traces" / "engine_b64_fixed"
ORIGINAL = REPO / "sample_traces" / "engine_b64_original_a"  # two new ops fail the default policy
LAX = "[tool.hlo-doctor.gate]\nfail_on_new = []\nmax_step_regression_pct = 1000\npeak_floor_bytes = 1099511627776\n"


def gate(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    r = CliRunner().invoke(main, ["gate", str(FIXED), str(ORIGINAL), "--top", "0", *args])
    return r.exit_code, r.stdout, r.stderr


def test_a_parent_policy_outside_a_repository_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(LAX)
    work = tmp_path / "ci" / "job"
    work.mkdir(parents=True)
    assert find_policy_file(work) is None and find_pyproject(work) is None
    code, _, err = gate(work, monkeypatch)
    assert code == 1 and "policy: defaults" in err


def test_a_policy_above_the_repository_root_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(LAX)
    repo = tmp_path / "checkout"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    assert find_policy_file(repo / "sub") is None
    assert gate(repo / "sub", monkeypatch)[0] == 1


def test_the_repositorys_own_policy_is_used_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "checkout"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    (repo / "pyproject.toml").write_text(LAX)
    assert find_policy_file(repo / "sub") == (repo / "pyproject.toml").resolve()
    code, _, err = gate(repo / "sub", monkeypatch)
    assert code == 0 and f"policy: {(repo / 'pyproject.toml').resolve()}" in err


def test_outside_a_repository_the_current_folders_policy_counts(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(LAX)
    assert gate(tmp_path, monkeypatch)[0] == 0


@pytest.mark.parametrize("fmt", ["table", "json", "md", "junit", "github"])
def test_every_report_names_its_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("max_op_regression_pct = 50\n")
    out = tmp_path / "report"
    code, stdout, err = gate(tmp_path, monkeypatch, "--policy", str(policy), "--format", fmt, "-o", str(out),
                             "--strict")
    assert code == 1
    text = out.read_text()
    if fmt == "json":
        assert json.loads(text)["policy"]["source"] == str(policy)
    elif fmt == "junit":
        props = ET.fromstring(text).find("testsuite/properties")
        assert props is not None and props.find("property").get("value") == str(policy)  # type: ignore[union-attr]
    else:
        assert str(policy) in text
    # Defaults are named as such, and flags are added to the name.
    code, _, err = gate(tmp_path, monkeypatch, "--max-op-regression", "10")
    assert "policy: defaults + flags (--max-op-regression" in err
