"""verify's evidence carries each side's peaks from its capture's buffer assignments, and the
reports print the change per program."""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.cli.memory import memory_report
from hlo_doctor.render.verify import peak_changes
from hlo_doctor.verify.evidence import hlo_evidence

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def test_each_sides_peak_and_the_change() -> None:
    base = hlo_evidence(SAMPLES / "engine_b64_original_a")
    fixed = hlo_evidence(SAMPLES / "engine_b64_fixed")
    expected = memory_report(SAMPLES / "engine_b64_original_a")
    assert dict(base.peaks)["jit_sample"] == max(p.peak_bytes for p in expected.step_programs
                                                  if p.module == "jit_sample")
    assert "jit_convert_element_type" not in dict(fixed.peaks)
    lines = peak_changes(base, fixed)
    assert "peak memory jit_sample: 125.0 MiB -> 31.3 MiB (-93.7 MiB)" in lines
    assert "peak memory jit_convert_element_type: 93.8 MiB -> - (gone)" in lines
    assert base.to_dict()["peak_bytes"]["jit_sample"] == dict(base.peaks)["jit_sample"]
