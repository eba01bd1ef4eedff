"""Threat: a run killed between its renames leaves a half-fixed tree that nobody mentions.

A SIGKILL (OOM killer, a cancelled CI job) between the renames used to leave the menu rekeyed and the
runner still widening - the state the tool itself says recompiles every step - and the next apply did
not mention it. Promise: the renames are driven by a journal written first; the next apply-fix or
--revert on the target finishes the interrupted run when every staged file is intact, or rolls it back
to the bytes before it otherwise, and says which. A failure inside a run (not a kill) rolls it back at
once. The kill is injected between renames with ``HLO_DOCTOR_INJECT_FAULT`` (the process ends with
``os._exit``, as abruptly as a SIGKILL).
"""

from __future__ import annotations

import json
from pathlib import Path

from threats import FIX, apply_args, cli, copy_engine, leftovers, picture
from threats import engine_tree as engine_tree_at

KILL_AFTER_ONE = {"HLO_DOCTOR_INJECT_FAULT": "kill-after-rename:1"}
JOURNAL = Path(".hlo-doctor/fixes") / f"{FIX}.journal.json"


def _patched_reference(tmp_path: Path) -> dict[str, object]:
    ref = copy_engine(tmp_path / "reference")
    assert cli(*apply_args(ref)).returncode == 0
    return {k: v for k, v in picture(ref).items() if not k.startswith(".hlo-doctor")}


def _sources(tree: Path) -> dict[str, object]:
    return {k: v for k, v in picture(tree).items() if not k.startswith(".hlo-doctor")}


def test_killed_apply_is_finished_by_the_next_run(tmp_path: Path) -> None:
    tree = engine_tree_at(tmp_path / "t")
    original = picture(tree)
    killed = cli(*apply_args(tree), env=KILL_AFTER_ONE)
    assert killed.returncode == 70
    assert (tree / JOURNAL).is_file()
    changed = [k for k, v in _sources(tree).items() if original.get(k) != v and not k.endswith(".hlo-doctor-tmp")]
    assert len(changed) == 1  # half-fixed on disk: exactly the state the journal exists for

    nxt = cli(*apply_args(tree, "--format", "json"))
    assert nxt.returncode == 0, nxt.stderr
    doc = json.loads(nxt.stdout)
    assert "finished" in doc["recovered"] and "recovered:" in nxt.stderr
    assert doc["status"] == "already-applied"
    assert _sources(tree) == _patched_reference(tmp_path)
    assert not leftovers(tree)
    assert cli(*apply_args(tree, "--revert")).returncode == 0
    assert picture(tree) == original


def test_killed_apply_with_a_staged_file_lost_is_rolled_back(tmp_path: Path) -> None:
    tree = engine_tree_at(tmp_path)
    original = picture(tree)
    assert cli(*apply_args(tree), env=KILL_AFTER_ONE).returncode == 70
    temps = [p for p in tree.glob(".*.hlo-doctor-tmp")]
    assert temps
    temps[0].unlink()  # the run cannot be finished any more

    nxt = cli(*apply_args(tree, "--revert", "--format", "json"))
    assert nxt.returncode == 0, nxt.stderr
    doc = json.loads(nxt.stdout)
    assert "rolled back" in doc["recovered"] and doc["status"] == "nothing-to-revert"
    assert picture(tree) == original


def test_killed_revert_is_finished_by_the_next_run(tmp_path: Path) -> None:
    tree = engine_tree_at(tmp_path)
    original = picture(tree)
    assert cli(*apply_args(tree)).returncode == 0
    assert cli(*apply_args(tree, "--revert"), env=KILL_AFTER_ONE).returncode == 70
    nxt = cli(*apply_args(tree, "--revert", "--format", "json"))
    assert nxt.returncode == 0, nxt.stderr
    assert "finished" in json.loads(nxt.stdout)["recovered"]
    assert picture(tree) == original


def test_a_failure_between_renames_rolls_back_at_once(tmp_path: Path) -> None:
    tree = engine_tree_at(tmp_path)
    original = picture(tree)
    failed = cli(*apply_args(tree), env={"HLO_DOCTOR_INJECT_FAULT": "fail-after-rename:2"})
    assert failed.returncode == 2, failed.stderr
    assert "nothing was changed" in failed.stderr
    assert picture(tree) == original


def test_dry_run_does_not_hide_an_interrupted_run(tmp_path: Path) -> None:
    tree = engine_tree_at(tmp_path)
    assert cli(*apply_args(tree), env=KILL_AFTER_ONE).returncode == 70
    before = picture(tree)
    dry = cli(*apply_args(tree, "--dry-run"))
    assert dry.returncode == 2 and "interrupted" in dry.stderr
    assert picture(tree) == before
