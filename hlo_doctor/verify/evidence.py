"""The HLO check's evidence: a captured run diagnosed by hlo-doctor's rules, and what each argmax in
it reads."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hlo_doctor.hlo.analysis import argmax_reads, argmax_times
from hlo_doctor.verify.results import HloEvidence
from hlo_doctor.verify.settings import HLO_RULES

__all__ = ["argmax_reads", "hlo_evidence"]


def hlo_evidence(run_dir: Path, *, select: Sequence[str] = HLO_RULES) -> HloEvidence:
    """Diagnose a captured run with hlo-doctor's rules ``select`` (HD001-HD004; empty: every rule) and read
    its argmax dtypes."""
    # Imported here: lint loads pandas, which nothing else of verify's import path needs.
    from hlo_doctor.lint import diagnose, load_context, load_rulebook

    ctx = load_context(run_dir)
    diagnosis = diagnose(ctx, load_rulebook(), select=select)
    peaks: dict[str, int] = {}
    for p in ctx.memory.step_programs if ctx.memory is not None else ():
        if not p.error:
            peaks[p.module] = max(peaks.get(p.module, 0), p.peak_bytes)
    return HloEvidence(
        run_dir=str(run_dir), findings=diagnosis.findings, rules_run=diagnosis.rules_run,
        argmax_reads=argmax_reads(ctx), step_time_us=diagnosis.step_time_us, argmax_times=argmax_times(ctx),
        peaks=tuple(sorted(peaks.items(), key=lambda kv: -kv[1])),
    )
