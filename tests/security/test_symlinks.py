"""Threat: links planted in a target steer apply-fix or --revert into writing outside it.

apply-fix runs in CI and in users' checkouts, often as root. Whoever can write into the target folder
(a shared checkout, a world-writable /tmp) may plant symbolic links where hlo-doctor writes: at the
names of its temporary files, as ``.hlo-doctor`` or one of its subfolders, or in place of a file the fix
edits. Promise: no path below the target root is followed through a link; the command stops with exit
2 and one line, and nothing outside the target (nor inside it) changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from threats import FIX, apply_args, leftovers, picture
from threats import engine_tree as engine_tree_at

from hlo_doctor.cli import main
from hlo_doctor.fixes import FixApplied, apply_fix

SECRET = b"the outside file\n"


def _outside_file(engine_tree: Path) -> Path:
    victim = engine_tree.parent / "outside" / "victim.txt"
    victim.write_bytes(SECRET)
    return victim


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stderr


def test_links_at_the_old_fixed_temp_names_are_never_opened(tmp_path: Path) -> None:
    engine_tree = engine_tree_at(tmp_path)
    victim = _outside_file(engine_tree)
    for name in (".probe.hlo-doctor-tmp", ".runner.py.hlo-doctor-tmp", ".sampling.py.hlo-doctor-tmp",
                 ".compilation_manager.py.hlo-doctor-tmp"):
        (engine_tree / name).symlink_to(victim)
    code, err = _run(*apply_args(engine_tree))
    assert code == 0, err
    assert victim.read_bytes() == SECRET
    # The planted links are left alone (they are not hlo-doctor's), nothing else is left behind.
    assert all((engine_tree / n).is_symlink() for n in (".probe.hlo-doctor-tmp", ".runner.py.hlo-doctor-tmp"))
    assert not [p for p in leftovers(engine_tree) if not (engine_tree / p).is_symlink()]


def test_a_guessed_temp_name_is_created_exclusively(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_tree = engine_tree_at(tmp_path)
    # Even an attacker who knew the next random name could not redirect the write: O_EXCL|O_NOFOLLOW.
    victim = _outside_file(engine_tree)
    monkeypatch.setattr("hlo_doctor.fixes.safe_io.secrets.token_hex", lambda n: "0" * (2 * n))
    for name in ("runner.py", "sampling.py", "compilation_manager.py", "probe"):
        (engine_tree / f".{name}.{'0' * 16}.hlo-doctor-tmp").symlink_to(victim)
    before = picture(engine_tree)
    code, err = _run(*apply_args(engine_tree))
    assert code == 2, err
    assert victim.read_bytes() == SECRET
    assert picture(engine_tree) == before


@pytest.mark.parametrize("planted", [".hlo-doctor", ".hlo-doctor/fixes", ".hlo-doctor/fixes/bf16-greedy-sampler.backup"])
def test_a_linked_state_folder_is_refused(tmp_path: Path, planted: str) -> None:
    engine_tree = engine_tree_at(tmp_path)
    outside = engine_tree.parent / "outside"
    link = engine_tree / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    before_outside, before = picture(outside), picture(engine_tree)
    code, err = _run(*apply_args(engine_tree))
    assert code == 2, err
    assert "symbolic link" in err and "Traceback" not in err
    assert picture(outside) == before_outside
    assert picture(engine_tree) == before


def test_a_linked_source_file_is_refused(tmp_path: Path) -> None:
    engine_tree = engine_tree_at(tmp_path)
    outside_runner = engine_tree.parent / "outside" / "runner.py"
    os.replace(engine_tree / "runner.py", outside_runner)
    (engine_tree / "runner.py").symlink_to(outside_runner)
    original, before = outside_runner.read_bytes(), picture(engine_tree)
    code, err = _run(*apply_args(engine_tree))
    assert code == 2, err
    assert "symbolic link" in err
    assert outside_runner.read_bytes() == original
    assert picture(engine_tree) == before


def test_revert_through_a_state_folder_swapped_for_a_link_is_refused(tmp_path: Path) -> None:
    engine_tree = engine_tree_at(tmp_path)
    assert isinstance(apply_fix(FIX, engine_tree), FixApplied)
    outside = engine_tree.parent / "outside"
    os.replace(engine_tree / ".hlo-doctor", outside / "moved")
    (engine_tree / ".hlo-doctor").symlink_to(outside / "moved", target_is_directory=True)
    before_outside, before = picture(outside), picture(engine_tree)
    code, err = _run(*apply_args(engine_tree, "--revert"))
    assert code == 2, err
    assert "symbolic link" in err
    assert picture(outside) == before_outside
    assert picture(engine_tree) == before
