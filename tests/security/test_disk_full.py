"""Threat: a full disk (or a quota) stops a run halfway and leaves temporary files or a half-fixed tree.

Before, temporary files were left behind after a failed write while the output said nothing changed.
Promise: every byte a run needs is written before its first rename (temporary files, copies, backups,
the next manifest, the journal); a write that fails removes everything staged, exits 2 with one line,
and the tree is byte-identical to before, ``.hlo-doctor`` included. The failing write is real, injected
at the OS layer in the child process: ``RLIMIT_FSIZE`` caps the size of any file it writes (``EFBIG``,
with ``SIGXFSZ`` ignored), at sizes that make different stages fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from threats import FIX_FILES, apply_args, cli, leftovers, picture
from threats import engine_tree as engine_tree_at


def _caps(tree: Path) -> list[int]:
    sizes = sorted((tree / name).stat().st_size for name in FIX_FILES)
    # Nothing fits; the manifest and journal fit but no source; some sources fit, the largest not.
    return [0, 1, 3000, sizes[0] + 200, sizes[-1] - 1]


@pytest.mark.parametrize("which", range(5))
def test_apply_on_a_full_disk_changes_nothing_and_leaves_nothing(tmp_path: Path, which: int) -> None:
    tree = engine_tree_at(tmp_path)
    limit = _caps(tree)[which]
    before = picture(tree)
    result = cli(*apply_args(tree), file_size_cap=limit)
    assert result.returncode == 2, (limit, result.stderr)
    assert "nothing was changed" in result.stderr and "Traceback" not in result.stderr
    assert not leftovers(tree)
    assert picture(tree) == before


def test_revert_on_a_full_disk_keeps_the_fix_and_its_backups(tmp_path: Path) -> None:
    tree = engine_tree_at(tmp_path)
    original = picture(tree)
    assert cli(*apply_args(tree)).returncode == 0
    patched = picture(tree)
    result = cli(*apply_args(tree, "--revert"), file_size_cap=0)
    assert result.returncode == 2, result.stderr
    assert not leftovers(tree)
    assert picture(tree) == patched
    assert cli(*apply_args(tree, "--revert")).returncode == 0
    assert picture(tree) == original
