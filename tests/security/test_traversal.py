"""Threat: a manifest or journal edited (or planted) to make --revert write outside the target.

--revert restores the bytes recorded in ``.hlo-doctor/fixes/<fix>.json`` from the backups beside it,
and the next run after an interrupted one follows ``<fix>.journal.json``. Both are files in the target
that anyone who can write there can edit. Promise: every path they name must be one of the files the
fix edits (relative, no ``..``, not absolute, no NUL, not null), every temporary name must look like
one hlo-doctor creates; anything else is exit 2 with one line naming the entry, and nothing changes.
Also here: input that used to crash the command (non-UTF-8 sources, rich markup in a path).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from threats import FIX, apply_args, picture
from threats import engine_tree as engine_tree_at

from hlo_doctor.cli import main
from hlo_doctor.fixes import FixApplied, apply_fix

SECRET = b"outside\n"
MANIFEST = Path(".hlo-doctor/fixes") / f"{FIX}.json"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stderr


def _applied_with_entry(tmp_path: Path, path_value: Any) -> Path:
    tree = engine_tree_at(tmp_path)
    (tmp_path / "outside" / "x").write_bytes(SECRET)
    assert isinstance(apply_fix(FIX, tree), FixApplied)
    manifest = json.loads((tree / MANIFEST).read_text())
    entry = dict(manifest["files"][0])
    entry["path"] = path_value
    manifest["files"].append(entry)
    (tree / MANIFEST).write_text(json.dumps(manifest))
    # A backup "matching" the planted entry, where a naive join would look for it.
    if isinstance(path_value, str) and "\0" not in path_value and not path_value.startswith("/"):
        backup = tree / ".hlo-doctor/fixes" / f"{FIX}.backup" / path_value
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / ".hlo-doctor/fixes" / f"{FIX}.backup" / manifest["files"][0]["path"], backup)
    return tree


@pytest.mark.parametrize(
    ("path_value", "said"),
    [
        ("../outside/x", "outside the target"),
        ("../../outside/x", "outside the target"),
        ("sub/../../outside/x", "outside the target"),
        ("/etc/passwd", "outside the target"),
        ("runner.py\0.txt", "outside the target"),
        (None, "no valid path"),
        (7, "no valid path"),
        ("config.py", "not a file this fix edits"),
    ],
)
def test_revert_refuses_manifest_paths_outside_the_fix(tmp_path: Path, path_value: Any, said: str) -> None:
    tree = _applied_with_entry(tmp_path, path_value)
    before, before_outside = picture(tree), picture(tmp_path / "outside")
    code, err = _run(*apply_args(tree, "--revert"))
    assert code == 2, err
    assert said in err and "Traceback" not in err
    assert picture(tree) == before
    assert picture(tmp_path / "outside") == before_outside
    assert (tmp_path / "outside" / "x").read_bytes() == SECRET


@pytest.mark.parametrize("field", ["path", "temp", "saved"])
def test_a_planted_journal_cannot_name_outside_paths(tmp_path: Path, field: str) -> None:
    tree = engine_tree_at(tmp_path)
    victim = tmp_path / "outside" / "x"
    victim.write_bytes(SECRET)
    entry = {"path": "runner.py", "before_sha256": "0" * 64, "after_sha256": "1" * 64,
             "temp": f".runner.py.{'a' * 16}.hlo-doctor-tmp", "saved": f".s.{'b' * 16}.hlo-doctor-tmp"}
    entry[field] = "../outside/x"
    journal = {"op": "apply", "fix": FIX, "files": [entry], "manifest_next": None, "drop_manifest": False,
               "new_backups": [], "drop_backups": []}
    (tree / ".hlo-doctor/fixes").mkdir(parents=True)
    (tree / ".hlo-doctor/fixes" / f"{FIX}.journal.json").write_text(json.dumps(journal))
    before = picture(tree)
    code, err = _run(*apply_args(tree))
    assert code == 2, err
    assert "journal" in err and "not valid" in err
    assert picture(tree) == before and victim.read_bytes() == SECRET


@pytest.mark.parametrize("name", ["runner.py", "__init__.py"])
def test_non_utf8_sources_are_input_errors(tmp_path: Path, name: str) -> None:
    tree = engine_tree_at(tmp_path)
    (tree / name).write_bytes((tree / name).read_bytes() + b"\n# \xff\xfe latin-1 \xe9\n")
    before = picture(tree)
    code, err = _run(*apply_args(tree))
    assert code == 2, err
    assert "not UTF-8" in err and "Traceback" not in err
    assert picture(tree) == before


@pytest.mark.parametrize("folder", ["[/x]", "[red]x", "a[bold]b[/bold]"])
def test_paths_with_markup_are_printed_as_written_and_apply_exits_0(tmp_path: Path, folder: str) -> None:
    tree = engine_tree_at(tmp_path / folder)
    code, err = _run(*apply_args(tree))
    assert code == 0, err
    assert folder in err.replace("\n", "")
    code, err = _run(*apply_args(tree, "--revert"))
    assert code == 0, err
