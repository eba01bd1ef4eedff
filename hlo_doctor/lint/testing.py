"""Rule examples as tests, and the HLO fixtures several rules' examples share.

A test module turns every rule's ``VALID``/``INVALID`` examples into test cases with
:func:`example_cases` and runs one with :func:`run_example`; the fixtures below are the small HLO
programs more than one rule file describes (an argmax reducer, an eager ``astype`` program).
"""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.core.model import Severity
from hlo_doctor.lint.context import Context
from hlo_doctor.lint.inputs import context_from_example
from hlo_doctor.lint.loader import LoadedRule, RuleBook
from hlo_doctor.lint.rule import Example
from hlo_doctor.lint.runner import run_rule

# The reducer XLA writes for argmax over (value, index) pairs: select the larger value, first index.
ARGMAX_REDUCER = """\
%region_0.1 (a: f32[], b: s32[], c: f32[], d: s32[]) -> (f32[], s32[]) {
  %a = f32[] parameter(0)
  %b = s32[] parameter(1)
  %c = f32[] parameter(2)
  %d = s32[] parameter(3)
  %gt = pred[] compare(%a, %c), direction=GT
  %sel = f32[] select(%gt, %a, %c)
  %seli = s32[] select(%gt, %b, %d)
  ROOT %t = (f32[], s32[]) tuple(%sel, %seli)
}
"""


# The sampler reduces its f32 parameter and returns only the tokens (an argmax reading f32).
ARGMAX_F32_TOKENS = """\
HloModule jit_sample, entry_computation_layout={(f32[8,1024]{1,0})->s32[8]{0}}

""" + ARGMAX_REDUCER + """
%fused_computation (param_0: f32[8,1024]) -> (f32[8], s32[8]) {
  %param_0 = f32[8,1024]{1,0} parameter(0)
  %iota.5 = s32[8,1024]{1,0} iota(), iota_dimension=1
  %constant.5 = f32[] constant(-inf)
  %constant.4 = s32[] constant(0)
  ROOT %reduce.2 = (f32[8]{0}, s32[8]{0}) reduce(%param_0, %iota.5, %constant.5, %constant.4), dimensions={1}, to_apply=%region_0.1, metadata={op_name="jit(sample)/reduce" source_file="sampling.py" source_line=125}
}

ENTRY %main.3 (logits.1: f32[8,1024]) -> s32[8] {
  %logits.1 = f32[8,1024]{1,0} parameter(0)
  %iota_reduce_fusion = (f32[8]{0}, s32[8]{0}) fusion(%logits.1), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(sample)/reduce" source_file="sampling.py" source_line=125}
  ROOT %gte = s32[8]{0} get-tuple-element(%iota_reduce_fusion), index=1
}
"""


# XLA:GPU's argmax over bf16[8,1024] with the widening fused into the first stage (the upstream
# fix's ``input_convert_reduce_fusion``): stage 1 reads bf16 and writes f32/s32 [8,16] partials,
# stage 2 reduces the partials to [8].
GPU_TWO_STAGE_ARGMAX_BF16 = """\
HloModule jit_sample, is_scheduled=true, entry_computation_layout={(bf16[8,1024]{1,0})->s32[8]{0}}

""" + ARGMAX_REDUCER + """
%fused_reduce (param_0.7: bf16[8,1024]) -> (f32[8,16], s32[8,16]) {
  %param_0.7 = bf16[8,1024]{1,0} parameter(0)
  %bitcast.5 = bf16[8,16,64]{2,1,0} bitcast(%param_0.7)
  %convert.15 = f32[8,16,64]{2,1,0} convert(%bitcast.5), metadata={op_name="jit(sample)/convert_element_type" source_file="sampling.py" source_line=104}
  %iota.4 = s32[8,1024]{1,0} iota(), iota_dimension=1
  %bitcast.1 = s32[8,16,64]{2,1,0} bitcast(%iota.4)
  %constant_0 = f32[] constant(-inf)
  %constant_1 = s32[] constant(0)
  ROOT %reduce.8 = (f32[8,16]{1,0}, s32[8,16]{1,0}) reduce(%convert.15, %bitcast.1, %constant_0, %constant_1), dimensions={2}, to_apply=%region_0.1, metadata={op_name="jit(sample)/reduce" source_file="sampling.py" source_line=105}
}

%fused_reduce.1 (param_0.6: f32[8,16], param_1.4: s32[8,16]) -> (f32[8], s32[8]) {
  %param_0.6 = f32[8,16]{1,0} parameter(0)
  %param_1.4 = s32[8,16]{1,0} parameter(1)
  %constant_2 = f32[] constant(-inf)
  %constant_3 = s32[] constant(0)
  ROOT %reduce.0 = (f32[8]{0}, s32[8]{0}) reduce(%param_0.6, %param_1.4, %constant_2, %constant_3), dimensions={1}, to_apply=%region_0.1, metadata={op_name="jit(sample)/reduce" source_file="sampling.py" source_line=105}
}

ENTRY %main.3 (logits.1: bf16[8,1024]) -> s32[8] {
  %logits.1 = bf16[8,1024]{1,0} parameter(0)
  %input_convert_reduce_fusion = (f32[8,16]{1,0}, s32[8,16]{1,0}) fusion(%logits.1), kind=kInput, calls=%fused_reduce
  %gte.2 = f32[8,16]{1,0} get-tuple-element(%input_convert_reduce_fusion), index=0
  %gte.1 = s32[8,16]{1,0} get-tuple-element(%input_convert_reduce_fusion), index=1
  %input_reduce_fusion.1 = (f32[8]{0}, s32[8]{0}) fusion(%gte.2, %gte.1), kind=kInput, calls=%fused_reduce.1
  ROOT %tokens = s32[8]{0} get-tuple-element(%input_reduce_fusion.1), index=1
}
"""

def eager_convert(source: str = "") -> str:
    """An eager ``x.astype(jnp.float32)``: its own program doing one bf16 -> f32 convert.

    ``source`` is the ``file.py:line`` its metadata names (none when empty).
    """
    meta = 'op_name="jit(convert_element_type)/convert_element_type"'
    if source:
        file, line = source.rsplit(":", 1)
        meta += f' source_file="{file}" source_line={line}'
    return f"""\
HloModule jit_convert_element_type, entry_computation_layout={{(bf16[8,1024]{{1,0}})->f32[8,1024]{{1,0}}}}

%wrapped_convert_computation (param_0: bf16[8,1024]) -> f32[8,1024] {{
  %param_0 = bf16[8,1024]{{1,0}} parameter(0)
  ROOT %convert_element_type.0 = f32[8,1024]{{1,0}} convert(%param_0), metadata={{{meta}}}
}}

ENTRY %main.1 (x.1: bf16[8,1024]) -> f32[8,1024] {{
  %x.1 = bf16[8,1024]{{1,0}} parameter(0)
  ROOT %wrapped_convert = f32[8,1024]{{1,0}} fusion(%x.1), kind=kLoop, calls=%wrapped_convert_computation
}}
"""


def example_cases(book: RuleBook, kind: str) -> list[tuple[LoadedRule, Example]]:
    """(rule, example) for every example of ``kind`` (``VALID`` or ``INVALID``) in the book."""
    return [(r, e) for r in book.rules for e in getattr(r.rule, kind)]


def case_id(case: tuple[LoadedRule, Example]) -> str:
    """A test id: ``HD002-identity function``."""
    rule, example = case
    return f"{rule.code}-{example.note or 'example'}"


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> text) under ``root``; returns ``root``."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def run_example(rule: LoadedRule, example: Example, tmp_path: Path) -> set[str]:
    """Run ``rule`` on ``example``: ``{"CODE op", "CODE op@module"}`` for each finding.

    Asserts that the rule did not crash (no internal-error finding).
    """
    source = write_tree(tmp_path / "src", dict(example.source)) if example.source else None
    ctx = context_from_example(example, source_root=source)
    findings = run_rule(rule, ctx)
    errors = [f for f in findings if f.severity == Severity.ERROR]
    assert not errors, errors
    out = set()
    for f in findings:
        out.add(f"{f.code} {f.op}")
        out.add(f"{f.code} {f.op}@{f.module}")
    return out


def empty_context() -> Context:
    """A context with nothing in it: every rule must yield no finding on it."""
    return Context()
