"""Check 2 of ``verify --target``: a cold-start cost fails it, a change of the step time alone does not.

The rounds' figures are the shapes the real wheels produced (docs/verify.md): on jaxlib 0.11.2 the
fixed ``sample()`` steps ~40% faster with an unchanged first step; on jaxlib 0.10.2 it steps ~30%
slower; the seed's hand fix compiles ``jit(sample)`` inside the first step of every cold round.
"""

from __future__ import annotations

from hlo_doctor.verify.tpu_inference.program import ProgramRound
from hlo_doctor.verify.tpu_inference.program_run import _check_first_step

BOUND = 1.25


def _rounds(first_ms: float, step_ms: float, n: int = 6) -> list[ProgramRound]:
    return [ProgramRound("x", first_ms, (first_ms, *([step_ms] * 7)), 1000.0 / step_ms, ()) for _ in range(n)]


def test_a_faster_step_with_the_same_first_step_passes() -> None:
    check = _check_first_step({"baseline": _rounds(0.20, 0.20), "treatment": _rounds(0.20, 0.12)}, BOUND)
    assert check.passed, check  # x1.00 as measured, x1.67 over the steady step


def test_a_slower_step_with_its_first_step_slower_alike_passes() -> None:
    check = _check_first_step({"baseline": _rounds(0.20, 0.20), "treatment": _rounds(0.27, 0.27)}, BOUND)
    assert check.passed, check  # x1.35 as measured, x1.00 over the steady step


def test_a_compile_in_the_first_step_fails() -> None:
    check = _check_first_step({"baseline": _rounds(0.20, 0.20), "treatment": _rounds(40.0, 0.12)}, BOUND)
    assert not check.passed, check
    assert "x200.00 median" in check.figure
