"""Where the machine has a C compiler, the install built the compiled reader.

The tests of the compiled reader skip in an install without it (a machine with no compiler falls
back to the numpy reader, as setup.py declares the extension optional). That skip must not hide a
build that should have happened: the README's install (``pip install -e``) and the wheel build the
extension wherever ``cc`` runs, so there its absence is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_doctor.trace import cwire


def test_an_install_on_a_machine_with_a_c_compiler_has_the_compiled_reader() -> None:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler on this machine: the install uses the numpy reader")
    assert cwire.COMPILED, "a C compiler is here but hlo_doctor.trace._xwire was not built: pip install -e . builds it"


def test_the_compiled_reader_allocates_without_the_gil_only_from_the_raw_allocator() -> None:
    """Judge: Python's debug allocator hooks, which abort when an allocator that needs the GIL is
    called without it (the compiled reader decodes a line with the GIL released; growing its columns
    with PyMem_Realloc there crashed Python 3.12 on XLA:CPU captures of jax 0.11)."""
    if not cwire.COMPILED:
        pytest.skip("no compiled reader in this install (its build is asserted above where cc exists)")
    # A GPU capture: its device planes are read by the compiled reader (an XLA:CPU capture of jax 0.11
    # has one too; one of jax 0.10 has none).
    capture = Path(__file__).resolve().parents[2] / "sample_traces" / "gpu_h200_original"
    env = dict(os.environ, PYTHONMALLOC="debug")
    done = subprocess.run(
        [sys.executable, "-m", "hlo_doctor", "stats", str(capture), "--format", "json"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "without holding the GIL" not in done.stderr
    assert json.loads(done.stdout)["schema"].startswith("hlo-doctor.")
