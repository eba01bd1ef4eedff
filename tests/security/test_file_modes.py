"""Output files get the mode the user's umask gives a new file (``0644`` under ``022``, ``0600`` under
``077``), as ``open()`` would: a CI step that uploads them as another user, or a web server, reads them
under the usual umask. They are still written atomically, and a link planted at the output's name is
replaced, never written through.

The umask is the real process's (``os.umask``, put back after each test); modes are read with
``os.stat``. Each xdist worker is a process of its own, so no other test sees the umask set here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.opstats import load_opstats, write_exports

REPO = Path(__file__).resolve().parents[2]
ORIGINAL_A = REPO / "sample_traces" / "engine_b64_original_a"
ORIGINAL_B = REPO / "sample_traces" / "engine_b64_original_b"


@pytest.fixture(params=[0o022, 0o077], ids=["umask-022", "umask-077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _commands(out: Path) -> list[tuple[list[str], Path]]:
    return [
        (["diagnose", str(ORIGINAL_A), "--format", "sarif", "-o", str(out / "hlo.sarif")], out / "hlo.sarif"),
        (["stats", str(ORIGINAL_A), "--format", "json", "-o", str(out / "stats.json")], out / "stats.json"),
        (["stats", str(ORIGINAL_A), "--format", "csv", "-o", str(out / "stats.csv")], out / "stats.csv"),
        (["gate", str(ORIGINAL_A), str(ORIGINAL_B), "--format", "junit", "-o", str(out / "gate.xml")],
         out / "gate.xml"),
        (["report", str(ORIGINAL_A), "-o", str(out / "page.html")], out / "page.html"),
    ]


def test_output_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    expected = 0o666 & ~umask
    for args, path in _commands(tmp_path):
        result = CliRunner().invoke(main, args)
        assert result.exit_code in (0, 1), (args, result.output)
        assert _mode(path) == expected, (args, oct(_mode(path)), oct(expected))
    # Nothing half-written is left beside them.
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_run_directory_exports_follow_the_umask(tmp_path: Path, umask: int) -> None:
    csv_path, json_path = write_exports(load_opstats(ORIGINAL_A / "opstats.json"), tmp_path)
    assert {_mode(csv_path), _mode(json_path)} == {0o666 & ~umask}


def test_a_link_planted_at_the_output_is_replaced_not_followed(tmp_path: Path, umask: int) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.chmod(victim, 0o600)
    planted = tmp_path / "stats.json"
    planted.symlink_to(victim)
    result = CliRunner().invoke(main, ["stats", str(ORIGINAL_A), "--format", "json", "-o", str(planted)])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "keep me\n" and _mode(victim) == 0o600
    assert not planted.is_symlink() and planted.read_text().startswith("{")
    assert _mode(planted) == 0o666 & ~umask
