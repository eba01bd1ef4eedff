"""The rules on real XLA:GPU HLO: the reference engine captured on an H200, before and after the fix.

The captures are the shared GPU runs (sample_traces/gpu_h200_original|fixed once committed there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.hlo.analysis import argmax_reads, reads_partials, selection_reduces
from hlo_doctor.lint import Context, diagnose, load_context, load_rulebook, run_rule, table_from_records
from hlo_doctor.lint.severity import severity_for
from hlo_doctor.lint.testing import eager_convert

ROOT = Path(__file__).resolve().parents[2]
BOOK = load_rulebook()


def _capture(case: str) -> Path:
    path = ROOT / "sample_traces" / f"gpu_h200_{case}"
    if not path.is_dir():
        pytest.fail(f"the H200 capture '{case}' is missing")
    return path


@pytest.fixture(scope="module")
def original() -> Context:
    return load_context(_capture("original"))


@pytest.fixture(scope="module")
def fixed() -> Context:
    return load_context(_capture("fixed"))


def _by_code(findings: tuple[Finding, ...]) -> dict[str, Finding]:
    return {f.code: f for f in findings}


def test_gpu_original_flags_copy_convert_program_and_wide_read_only(original: Context) -> None:
    result = diagnose(original, BOOK)
    got = {(f.code, f.op) for f in result.findings}
    # HLO waste: the copy, the standalone convert, the wide read; and the step is host-bound (HD015:
    # 0.18 ms of kernels in a 1.9 ms step), which the sampler fix does not change.
    assert got == {("HD002", "copy.1"), ("HD003", "wrapped_convert"), ("HD004", "input_reduce_fusion"),
                   ("HD015", "")}, got


def test_gpu_fixed_has_no_hlo_findings(fixed: Context) -> None:
    result = diagnose(fixed, BOOK)
    assert {f.code for f in result.findings} == {"HD015"}, [f.message for f in result.findings]
    assert result.findings[0].source.endswith("runner.py:124")


def test_hd002_follows_tuple_and_get_tuple_element_to_the_parameter(original: Context) -> None:
    f = _by_code(diagnose(original, BOOK, select=["HD002"]).findings)["HD002"]
    assert "parameter 0" in f.message and "output 1" in f.message
    assert f.time_per_step_us == pytest.approx(30.0, abs=0.1)
    # The copy has no metadata and the parameter no line: no source, not another op's line.
    assert f.source == ""


def test_hd003_counts_the_host_dispatch_of_the_standalone_program(original: Context) -> None:
    f = _by_code(diagnose(original, BOOK, select=["HD003"]).findings)["HD003"]
    extra = dict(f.extra)
    assert f.time_per_step_us == pytest.approx(23.4, abs=0.1)
    # PjitFunction(convert_element_type) spans 85.5, 62.3, 67.6, 56.9, 63.8 us over the 5 steps.
    assert extra["host_dispatch_us_per_step"] == pytest.approx(67.2, abs=0.1)
    # The whole eager astype around it (190 us per step) goes with the fix: the device's idle time
    # inside it, plus the convert's kernel time that ran inside it (tests/lint/test_host_cost.py).
    assert extra["host_us_per_step"] == pytest.approx(190.0, abs=0.1)
    # And the runner's second astype in the same function (37.7 us per step; it converts nothing
    # only because the first widened): 31.6 us of device idle inside it. 178.1 us without it.
    assert extra["repeat_host_us_per_step"] == pytest.approx(37.7, abs=0.1)
    assert f.recoverable_us == pytest.approx(178.1 + extra["repeat_idle_us_per_step"], abs=0.1)
    assert extra["repeat_idle_us_per_step"] == pytest.approx(31.6, abs=0.1)
    assert extra["launches_per_step"] == 1.0


def test_argmax_reads_skip_the_partials_of_a_two_stage_argmax(original: Context, fixed: Context) -> None:
    assert argmax_reads(original) == ("jit_sample: f32[64,256000]",)
    assert argmax_reads(fixed) == ("jit_sample: bf16[64,256000]",)
    module = next(m for m in fixed.modules if m.name == "jit_sample")
    stages = [(op.name, reads_partials(module, inner)) for op, inner, _ in selection_reduces(module)]
    assert stages == [("input_reduce_fusion", False), ("input_reduce_fusion.1", True)]


def test_severity_follows_share_of_step(original: Context) -> None:
    result = diagnose(original, BOOK)
    step = result.step_time_us or 0.0
    for f in result.findings:
        share = 100.0 * (f.recoverable_us or 0.0) / step
        assert f.severity == severity_for(share, _category(original, f)), (f.code, share)
    got = {f.code: f.severity for f in result.findings if f.code != "HD015"}
    # 178 us (9.5%) and 30 us (1.6%, a copy: within 75% of the 2% edge) are high; 11 us (0.6%) medium.
    assert got == {"HD003": Severity.HIGH, "HD002": Severity.HIGH, "HD004": Severity.MEDIUM}


def _category(ctx: Context, f: Finding) -> str:
    timing = ctx.op_timing(f.module, f.op, f.program_id)
    return timing.category if timing is not None else ""


def test_severity_bands() -> None:
    assert severity_for(0.03) == Severity.INFO  # a 16 KiB copy in a 1.7 s step
    assert severity_for(0.05) == Severity.LOW
    assert severity_for(0.6, "reduce") == Severity.MEDIUM
    assert severity_for(1.6, "reduce") == Severity.MEDIUM
    assert severity_for(1.6, "copy") == Severity.HIGH
    assert severity_for(2.0, "matmul") == Severity.HIGH


def test_hd003_counts_runs_on_one_device_not_over_all_devices() -> None:
    # Two cores each run the eager convert once per step: 20 occurrences over 10 steps is 1.0x.
    rows = [{"module": "jit_convert_element_type", "op": "wrapped_convert", "occurrences": 20, "devices": 2,
             "time_per_step_us": 40.0, "category": "convert"}]
    from hlo_doctor.hlo import parse_modules

    ctx = Context(modules=tuple(parse_modules(eager_convert())), table=table_from_records(rows),
                  step_time_us=1000.0, num_steps=10)
    hd003 = BOOK.get("HD003")
    assert hd003 is not None
    (f,) = run_rule(hd003, ctx)
    assert "runs 1.0x per step" in f.message and dict(f.extra)["launches_per_step"] == 1.0


def test_compiler_inserted_summary_on_cpu() -> None:
    result = diagnose(load_context(ROOT / "sample_traces" / "engine_b64_original_a"), BOOK)
    assert result.compiler_inserted_ops == 6
    assert result.compiler_inserted_us == pytest.approx(219.6, abs=0.1)
    assert result.compiler_inserted_line() == (
        "cpu: 0.1% of the step (0.2 ms) is in 6 converts/copies the compiler inserted; no source line, "
        "no finding")


def test_verify_check_4_evidence_passes_on_the_fixed_capture() -> None:
    from hlo_doctor.verify import failing_findings, hlo_evidence

    fixed = hlo_evidence(_capture("fixed"))
    assert fixed.argmax_reads == ("jit_sample: bf16[64,256000]",)
    assert failing_findings(fixed) == []
    original = hlo_evidence(_capture("original"))
    assert {f.code for f in failing_findings(original)} == {"HD002", "HD003", "HD004"}


def test_upstream_shape_convert_fused_into_stage_one_reads_bf16() -> None:
    from hlo_doctor.hlo import parse_modules
    from hlo_doctor.lint.testing import GPU_TWO_STAGE_ARGMAX_BF16

    ctx = Context(modules=tuple(parse_modules(GPU_TWO_STAGE_ARGMAX_BF16)))
    assert argmax_reads(ctx) == ("jit_sample: bf16[8,1024]",)
    assert diagnose(ctx, BOOK).findings == ()
