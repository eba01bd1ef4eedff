"""The HLO's stage (optimized or as lowered): how it is told, and where diagnose says it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.core.model import Severity
from hlo_doctor.hlo import parse_module
from hlo_doctor.lint import diagnose, load_context, load_rulebook, stage_of

_LOWERED = """\
HloModule jit_max, entry_computation_layout={(bf16[8,1024]{1,0})->f32[8]{0}}

%region_0.1 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %main.3 (l.1: bf16[8,1024]) -> f32[8] {
  %l.1 = bf16[8,1024]{1,0} parameter(0)
  %convert.1 = f32[8,1024]{1,0} convert(%l.1), metadata={op_name="jit(max)/convert_element_type"}
  %constant.2 = f32[] constant(-inf)
  ROOT %reduce.1 = f32[8]{0} reduce(%convert.1, %constant.2), dimensions={1}, to_apply=%region_0.1
}
"""


def test_stage_is_told_by_name_schedule_and_fusions() -> None:
    lowered = parse_module(_LOWERED)
    assert not stage_of(lowered).optimized
    assert "before XLA's passes" in stage_of(lowered).evidence()
    scheduled = parse_module(_LOWERED.replace("HloModule jit_max,", "HloModule jit_max, is_scheduled=true,"))
    assert stage_of(scheduled).optimized and stage_of(scheduled).reason == "is_scheduled=true"
    assert stage_of(lowered, "dump/module_0001.jit_max.after_optimizations.txt").optimized
    assert not stage_of(scheduled, "dump/module_0001.jit_max.before_optimizations.txt").optimized


def test_unoptimized_findings_are_low_and_say_the_stage(tmp_path: Path) -> None:
    path = tmp_path / "lowered.hlo.txt"
    path.write_text(_LOWERED)
    d = diagnose(load_context(path), load_rulebook())
    found = {f.code: f for f in d.findings}
    assert set(found) == {"HD001", "HD004"}
    for f in found.values():
        assert f.severity == Severity.LOW
        assert "unoptimized HLO" in f.message
        assert any(e.startswith("stage: unoptimized HLO") for e in f.evidence)
    assert d.stage_line.startswith("stage: 1 of 1 module unoptimized (jit_max)")
    assert d.to_dict()["stage"] == d.stage_line
    out = CliRunner().invoke(main, ["diagnose", str(path), "--format", "concise"])
    assert d.stage_line in out.output
    # Optimized (scheduled), the same convert is evidence of a widened read: the rule's severity.
    path.write_text(_LOWERED.replace("HloModule jit_max,", "HloModule jit_max, is_scheduled=true,"))
    d = diagnose(load_context(path), load_rulebook())
    assert {f.code: f.severity for f in d.findings} == {"HD001": Severity.MEDIUM, "HD004": Severity.MEDIUM}
    assert d.stage_line == ""
