"""The compiled passes of the reader (a line's events decoded into their final columns, each event's
enclosing module run and step, the op sums) against the numpy reader on real captures: ``stats`` with
``HLO_DOCTOR_NUMPY_READER`` set (every compiled pass off) must write the same JSON, byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_doctor.trace import cwire

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
pytestmark = pytest.mark.skipif(not cwire.COMPILED, reason="the compiled reader is not built in this install")


def _stats(source: Path, out: Path, numpy_reader: bool) -> bytes:
    env = {k: v for k, v in os.environ.items() if k != cwire.NUMPY_READER_ENV}
    if numpy_reader:
        env[cwire.NUMPY_READER_ENV] = "1"
    subprocess.run([sys.executable, "-m", "hlo_doctor", "stats", str(source), "--format", "json", "--per-step",
                    "-o", str(out)], env=env, check=True, capture_output=True, timeout=300)
    return out.read_bytes()


@pytest.mark.parametrize("capture", ["tpu_v5e_original", "gpu_h200_seed_b512", "engine_b64_original_a"])
def test_compiled_and_numpy_readers_write_the_same_table(capture: str, tmp_path: Path) -> None:
    source = SAMPLES / capture
    assert _stats(source, tmp_path / "compiled.json", False) == _stats(source, tmp_path / "numpy.json", True)
