"""Verify's use of :mod:`hlo_doctor.statistics`: one comparison, with the settings' effect size,
significance level and bootstrap seed, for every figure of every kind of target."""

from __future__ import annotations

from collections.abc import Sequence

from hlo_doctor.statistics import SampleComparison, compare_samples
from hlo_doctor.verify.settings import MeasureSettings


def compare(settings: MeasureSettings, baseline: Sequence[float], treatment: Sequence[float], *,
            lower_is_better: bool = True) -> SampleComparison:
    """``compare_samples`` with the settings' effect size, alpha and seed."""
    return compare_samples(baseline, treatment, min_effect=settings.min_effect, alpha=settings.alpha,
                           lower_is_better=lower_is_better, seed=settings.seed)
