"""Threat: two apply-fix (or an apply and a revert) at once on one target lose the original bytes.

Two CI jobs, or a user and a script, run on the same checkout. Before the lock, in 4 of 18 trials the
tree ended patched while the other process's clean-up deleted the manifest and the backups. Promise:
one apply-fix or --revert at a time per target (an exclusive lock on the target folder, held for the
whole run); the others wait, then see the tree as the first left it. A command that cannot get the
lock in time exits 2 with one line and changes nothing. Real processes, no mocks.
"""

from __future__ import annotations

import json
from pathlib import Path

from threats import ENGINE, FIX, FIX_FILES, apply_args, cli, leftovers, picture, popen
from threats import engine_tree as engine_tree_at

from hlo_doctor.fixes.safe_io import target_lock

PROCESSES = 4


def test_concurrent_applies_patch_once_and_keep_the_originals(tmp_path: Path) -> None:
    for trial in range(2):
        tree = engine_tree_at(tmp_path / f"t{trial}")
        original = picture(tree)
        procs = [popen(*apply_args(tree, "--format", "json")) for _ in range(PROCESSES)]
        outs = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        assert all(code == 0 for code, _, _ in outs), outs
        statuses = sorted(json.loads(out)["status"] for _, out, _ in outs)
        assert statuses == ["already-applied"] * (PROCESSES - 1) + ["applied"], statuses
        manifest = json.loads((tree / f".hlo-doctor/fixes/{FIX}.json").read_text())
        assert sorted(e["path"] for e in manifest["files"]) == sorted(FIX_FILES)
        assert not leftovers(tree)
        code = cli(*apply_args(tree, "--revert")).returncode
        assert code == 0
        assert picture(tree) == original


def test_apply_and_revert_racing_leave_a_consistent_tree(tmp_path: Path) -> None:
    tree = engine_tree_at(tmp_path)
    original = picture(tree)
    procs = [popen(*apply_args(tree, *(("--revert",) if i % 2 else ()))) for i in range(PROCESSES)]
    codes = [p.wait(timeout=300) for p in procs]
    for p in procs:
        p.communicate()
    assert codes == [0] * PROCESSES
    assert not leftovers(tree)
    # Whatever the order, the tree is either the original or patched with a manifest that reverts it.
    if (tree / ".hlo-doctor").exists():
        assert cli(*apply_args(tree, "--revert")).returncode == 0
    assert picture(tree) == original


def test_a_held_lock_makes_a_second_run_wait_then_exit_2(tmp_path: Path) -> None:
    tree = engine_tree_at(tmp_path)
    before = picture(tree)
    with target_lock(tree):
        result = cli(*apply_args(tree), env={"HLO_DOCTOR_LOCK_WAIT_S": "1"})
    assert result.returncode == 2, result.stderr
    assert "is locked by another hlo-doctor" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # one message (rich may wrap it)
    assert picture(tree) == before
    assert ENGINE.is_dir()
