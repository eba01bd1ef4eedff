"""What a finding carries from the HLO: the source line of the op that matters."""

from __future__ import annotations

from hlo_doctor.hlo import parse_module
from hlo_doctor.hlo.analysis import key_instruction
from hlo_doctor.lint import Context, Rule, Severity

# A fusion whose root (and so the fusion's own metadata) is a framework helper's select, while the
# op that costs is the reduce written on model.py:40.
_HELPER_ROOT = """\
HloModule jit_f, entry_computation_layout={(f32[8,1024]{1,0})->f32[8]{0}}

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

%fused (p: f32[8,1024]) -> f32[8] {
  %p = f32[8,1024]{1,0} parameter(0)
  %c = f32[] constant(-inf)
  %r = f32[8]{0} reduce(%p, %c), dimensions={1}, to_apply=%max, metadata={op_name="jit(f)/reduce_max" source_file="model.py" source_line=40}
  %z = f32[8]{0} broadcast(%c), dimensions={}
  %k = pred[8]{0} compare(%r, %z), direction=GT
  ROOT %s = f32[8]{0} select(%k, %r, %z), metadata={op_name="jit(f)/jit(_where)/select_n" source_file="numpy/util.py" source_line=9}
}

ENTRY %main (x: f32[8,1024]) -> f32[8] {
  %x = f32[8,1024]{1,0} parameter(0)
  ROOT %f = f32[8]{0} fusion(%x), kind=kInput, calls=%fused, metadata={op_name="jit(f)/jit(_where)/select_n" source_file="numpy/util.py" source_line=9}
}
"""

_NO_METADATA = """\
HloModule jit_g, entry_computation_layout={(f32[8,1024]{1,0})->f32[8,1024]{1,0}}

ENTRY %main (x: f32[8,1024]) -> f32[8,1024] {
  %x = f32[8,1024]{1,0} parameter(0)
  %n = f32[8,1024]{1,0} negate(%x), metadata={op_name="jit(g)/neg" source_file="model.py" source_line=3}
  ROOT %copy = f32[8,1024]{1,0} copy(%n)
}
"""


class _Probe(Rule):
    """Probe."""

    code = "XX001"
    name = "probe"
    severity = Severity.LOW


def test_a_fusion_takes_the_line_of_the_op_that_matters_inside() -> None:
    module = parse_module(_HELPER_ROOT)
    fusion = module.entry.root
    assert key_instruction(module, fusion).name == "r"
    finding = Context(modules=(module,)).finding(_Probe, module, fusion, "m")
    assert finding.source == "model.py:40"


def test_no_line_rather_than_another_op_line() -> None:
    module = parse_module(_NO_METADATA)
    finding = Context(modules=(module,)).finding(_Probe, module, module.entry.root, "m")
    assert finding.source == ""
