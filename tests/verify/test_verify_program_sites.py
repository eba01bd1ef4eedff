"""``verify FILE.py:FUNC --fix FIX`` without ``--fix-line``: the lines come from the baseline's own
findings; a file where no finding offers the fix (or one of an installed package) is bad input, named,
with the file untouched.

(The lines found for eager-widening, argmax-without-softmax and donate-state, and the verdicts of those
runs, are held by ``test_verify_program.py``'s fix test.)
"""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from hlo_doctor.cli import main

# A decode loop that would take donate-state (its cache is rebound from the jit's result), over a cache
# too small for XLA's entry copy of it to be a finding (HD009's floor is 4 KiB): nothing names a line.
SMALL_LOOP = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.jit, static_argnames=("steps",))
def decode(cache, steps):
    def body(i, c):
        return jax.lax.dynamic_update_slice(c, c[i][None] * 0.5 + 1.0, ((i + 1) % 4, 0))

    return jax.lax.fori_loop(0, steps, body, cache)


CACHE = jnp.asarray(np.random.default_rng(0).standard_normal((4, 8)), jnp.float32)


def run(cache):
    cache = decode(cache, 4)
    return cache


def step():
    return run(CACHE + 0.0)
'''


def test_a_fix_no_finding_offers_is_refused_naming_why(tmp_path: Path) -> None:
    path = tmp_path / "small_loop.py"
    path.write_text(SMALL_LOOP)
    before = path.read_bytes()
    result = CliRunner().invoke(main, ["verify", f"{path}:step", "--fix", "donate-state", "--rounds", "3",
                                       "--steps", "1", "--warmup", "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "--fix donate-state: no finding of the baseline's capture offers it in small_loop.py" in said
    assert re.search(r"its rules HD009, HD002(, HD016)? found nothing", said) and "--fix-line" in said
    assert path.read_bytes() == before
    assert not (tmp_path / "out" / "verify.json").exists() and not (tmp_path / "out" / "treatment").exists()
    # With the line given, the same file is fixed where the user says (the codemod's own check).
    line = next(i for i, text in enumerate(SMALL_LOOP.splitlines(), 1) if "jax.lax.fori_loop(" in text)
    result = CliRunner().invoke(main, ["verify", f"{path}:step", "--fix", "donate-state", "--fix-line", str(line),
                                       "--rounds", "3", "--steps", "1", "--warmup", "1", "--format", "md"])
    assert result.exit_code in (0, 1), result.output
    assert f"fixed at small_loop.py:{line}, as --fix-line said" in " ".join(result.output.split())


def test_an_argument_without_a_line_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "small_loop.py"
    path.write_text(SMALL_LOOP + "\nimport pathlib\npathlib.Path(__file__).with_suffix('.imported').touch()\n")
    result = CliRunner().invoke(main, ["verify", f"{path}:step", "--fix", "donate-state", "--fix-arg", "cache"])
    assert result.exit_code == 2, result.output
    assert "--fix-arg without --fix-line" in result.output
    assert not path.with_suffix(".imported").exists()


def test_a_file_of_an_installed_package_is_refused_saying_to_verify_a_copy(tmp_path: Path) -> None:
    # As in diagnose, an installed package's frames are not editable: no finding could name its lines.
    path = tmp_path / "lib" / "python3.11" / "site-packages" / "small_loop.py"
    path.parent.mkdir(parents=True)
    path.write_text(SMALL_LOOP + "\nimport pathlib\npathlib.Path(__file__).with_suffix('.imported').touch()\n")
    result = CliRunner().invoke(main, ["verify", f"{path}:step", "--fix", "donate-state"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "small_loop.py is inside an installed package" in said
    assert "copy small_loop.py out of site-packages" in said and "verify the copy" in said
    assert not path.with_suffix(".imported").exists()  # refused before anything is imported
