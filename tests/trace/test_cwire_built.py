"""Where the machine has a C compiler, the install built the compiled reader.

The tests of the compiled reader skip in an install without it (a machine with no compiler falls
back to the numpy reader, as setup.py declares the extension optional). That skip must not hide a
build that should have happened: the README's install (``pip install -e``) and the wheel build the
extension wherever ``cc`` runs, so there its absence is a failure.
"""

from __future__ import annotations

import shutil

import pytest

from hlo_doctor.trace import cwire


def test_an_install_on_a_machine_with_a_c_compiler_has_the_compiled_reader() -> None:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler on this machine: the install uses the numpy reader")
    assert cwire.COMPILED, "a C compiler is here but hlo_doctor.trace._xwire was not built: pip install -e . builds it"
