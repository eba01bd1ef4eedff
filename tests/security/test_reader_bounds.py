"""Threat: a capture made to cost the readers time and memory by its counts and sizes, and a command run
under an address-space limit.

A real xplane given a million empty lines on a device plane or on its host plane (8 MB on disk; minutes
and 800 MiB to read before), HLO text with a 100 MB name in one op's metadata (past two minutes and
12 GiB before): each is exit 2 with one line naming the file, in seconds. ``profile -o out.json`` under
``RLIMIT_AS`` (set in the child itself): the chart engine, whose start aborts the process under such a
limit (SIGTRAP, exit 133), is not started; the run, its report (tables, saying why) and the JSON are
written.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_bounded_readers import one_line_error
from threats import REPO, cli

RUN = REPO / "sample_traces" / "engine_b64_original_a"
SEED_HLO = REPO / "sample_traces" / "seed_v5e_b512" / "jit_sample(23).hlo.txt"


def _million_lines(tmp_path: Path, plane: str) -> Path:
    from hlo_doctor.trace import xplane_pb2 as xp

    space = xp.XSpace.FromString(next(RUN.glob("plugins/profile/*/*.xplane.pb")).read_bytes())
    target = space.planes.add(id=999, name="/device:TPU:0") if plane == "device" else \
        next(p for p in space.planes if p.name.startswith("/host:CPU"))
    for i in range(1_000_000):
        target.lines.add(id=10_000_000 + i)
    out = tmp_path / "plugins" / "profile" / "r" / "vm.xplane.pb"
    out.parent.mkdir(parents=True)
    out.write_bytes(space.SerializeToString())
    return out


@pytest.mark.parametrize("plane", ["device", "host"])
def test_a_million_empty_lines_is_exit_2_in_seconds(tmp_path: Path, plane: str) -> None:
    xplane = _million_lines(tmp_path, plane)
    start = time.monotonic()
    r = cli("stats", str(tmp_path), "--format", "json", timeout=90)
    one_line_error(r, str(xplane), "65,536 lines")
    assert time.monotonic() - start < 60


def test_a_100_mb_name_in_hlo_text_is_exit_2_in_seconds(tmp_path: Path) -> None:
    meta = 'metadata={op_name="' + "A" * 100_000_000 + '" source_file="/s.py" source_line=3}'
    hlo = tmp_path / "big.hlo.txt"
    hlo.write_text(SEED_HLO.read_text().replace("copy(%Arg_1.2)", "copy(%Arg_1.2), " + meta))
    start = time.monotonic()
    one_line_error(cli("diagnose", str(hlo), timeout=90), str(hlo), "MiB")
    assert time.monotonic() - start < 60


TARGET = "import jax.numpy as jnp\n\ndef step():\n    return (jnp.ones((64, 64)) @ jnp.ones((64, 64))).sum()\n"


def test_profile_under_an_address_space_limit_writes_its_files(tmp_path: Path) -> None:
    pytest.importorskip("vl_convert")
    (tmp_path / "t.py").write_text(TARGET)
    program = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY)); "
               "from hlo_doctor.cli import main; sys.argv[0] = 'hlo-doctor'; main()")
    r = subprocess.run([sys.executable, "-c", program, "profile", "t.py:step", "--out", "run", "-o", "out.json",
                        "--format", "json", "--steps", "2"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert json.loads((tmp_path / "out.json").read_text())["rows"]
    page = (tmp_path / "run" / "report.html").read_text()
    assert "address-space limit" in page
