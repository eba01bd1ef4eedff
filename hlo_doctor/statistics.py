"""Deciding whether two sets of timing samples differ: improved, no change, regressed or inconclusive.

Used by ``hlo-doctor gate`` (step times and per-op times of two captures) and by ``hlo-doctor verify``
(interleaved A/B measurements). One entry point, :func:`compare_samples`, returns a
:class:`SampleComparison`; :func:`compare_point_estimates` is its fallback when a run has no per-step
samples.

How a comparison is decided
---------------------------
Let ``ratio = median(candidate) / median(baseline)`` and ``e = min_effect`` (a fraction: 0.05 = 5%).
For quantities where lower is better (times, the default) the candidate is *worse* when the ratio is
above 1; pass ``lower_is_better=False`` for throughputs.

Two pieces of evidence are computed:

* a two-sided **Mann-Whitney U** test (scipy) of the two samples: ``p_value``;
* a percentile **bootstrap confidence interval** of the median ratio at level ``1 - alpha``
  (``ci_low``, ``ci_high``), from ``n_bootstrap`` independent resamples of each side with a fixed
  seed, so the same samples always give the same answer (a CI gate must not flip on a re-run).

The outcome, in this order:

1. **inconclusive** when either side has fewer than ``min_samples`` samples.
2. **regressed** when ``p_value < alpha``, the ratio is worse than ``1 + e`` (``1 / (1 + e)`` for
   higher-is-better) and the whole CI lies on the worse side of 1: the difference is both real and
   large enough to matter.
3. **improved**: the mirror image of 2.
4. **no change** when the whole CI lies inside the equivalence band ``(1 / (1 + e), 1 + e)``: the data
   rule out an effect as large as the minimum effect, in either direction.
5. **inconclusive** otherwise: the samples are too noisy (or too few) either to show an effect of at
   least ``e`` or to rule one out. ``reason`` says which. A gate reports this as "within noise" and
   passes, unless it runs in a strict mode.

Example (``verify``: interleaved A/B step times, in microseconds)::

    from hlo_doctor.statistics import Outcome, compare_samples

    result = compare_samples(baseline_step_us, treatment_step_us, min_effect=0.02, alpha=0.05)
    if result.outcome is Outcome.INCONCLUSIVE:
        ...  # more rounds, or report it as such: result.reason says why
    print(f"{result.outcome}: {result.change_pct:+.1f}% "
          f"[{result.ci_low:.3f}, {result.ci_high:.3f}], p={result.p_value:.2g}")

For a throughput (tokens per second) pass ``lower_is_better=False``. The samples must be independent
draws of the same quantity: with samples taken in separate captures of a shared machine, the
between-capture variation is not in them (``hlo_doctor.gate`` estimates it from the ops in common);
interleaving A and B in one session, as ``verify`` does, keeps it out.

The band is symmetric on a log scale (a 5% slowdown and the matching speedup are ``1.05`` and
``1 / 1.05``), so swapping baseline and candidate swaps regressed and improved and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from hlo_doctor.core.format import json_float

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MIN_SAMPLES",
    "DEFAULT_N_BOOTSTRAP",
    "Outcome",
    "SampleComparison",
    "compare_point_estimates",
    "compare_samples",
]

DEFAULT_ALPHA = 0.05
DEFAULT_MIN_SAMPLES = 5
DEFAULT_N_BOOTSTRAP = 2000


class Outcome(StrEnum):
    """What a comparison concluded about the candidate relative to the baseline."""

    IMPROVED = "improved"
    NO_CHANGE = "no change"
    REGRESSED = "regressed"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, slots=True)
class SampleComparison:
    """The result of comparing a candidate's samples with a baseline's.

    ``ratio``, ``ci_low`` and ``ci_high`` are candidate over baseline (medians). ``p_value``, ``ci_low``
    and ``ci_high`` are NaN when the comparison had no samples to test (a point estimate).
    """

    outcome: Outcome
    ratio: float
    """median(candidate) / median(baseline); inf when the baseline median is 0 and the candidate's is not."""
    ci_low: float
    ci_high: float
    """Bootstrap confidence interval of ``ratio`` at level ``1 - alpha``."""
    p_value: float
    """Two-sided Mann-Whitney U p-value."""
    baseline_median: float
    candidate_median: float
    n_baseline: int
    n_candidate: int
    min_effect: float
    """The smallest relative change that counts (0.05 = 5%)."""
    alpha: float
    lower_is_better: bool
    reason: str
    """One sentence saying why the outcome is what it is."""
    method: str = "samples"
    """``samples``: the two samples as independent draws (this module). ``paired rounds``: per-round
    medians compared within each interleaved pair of rounds (:func:`hlo_doctor.verify.stats.compare_blocks`)."""
    blocks: int = 0
    """With ``paired rounds``: the pairs of rounds the ratio, CI and p-value come from."""

    @property
    def change_pct(self) -> float:
        """Relative change of the median in percent (positive = candidate larger)."""
        return (self.ratio - 1.0) * 100.0

    @property
    def tested(self) -> bool:
        """Whether a statistical test was run (False for point estimates)."""
        return not math.isnan(self.p_value)

    @property
    def significant(self) -> bool:
        """Tested and ``p < alpha``: a change the data show, whatever its size."""
        return self.tested and self.p_value < self.alpha

    @property
    def statistic(self) -> str:
        """What :attr:`ratio` is a ratio of, for a label: the medians, or the paired rounds' trimmed means."""
        return "paired trimmed-mean ratio" if self.method == "paired rounds" else "medians' ratio"

    def ratio_text(self) -> str:
        """``paired trimmed-mean ratio x0.994, 95% CI [0.971, 1.018]``: the verdict's figure, labelled."""
        ci = "" if math.isnan(self.ci_low) else \
            f", {(1 - self.alpha) * 100:.4g}% CI [{self.ci_low:.3f}, {self.ci_high:.3f}]"
        return f"{self.statistic} x{self.ratio:.3f}{ci}"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (NaN and inf become None / strings)."""
        return {
            "outcome": str(self.outcome),
            "ratio": json_float(self.ratio),
            "change_pct": json_float(self.change_pct),
            "ci_low": json_float(self.ci_low),
            "ci_high": json_float(self.ci_high),
            "p_value": json_float(self.p_value),
            "baseline_median": json_float(self.baseline_median),
            "candidate_median": json_float(self.candidate_median),
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "min_effect": self.min_effect,
            "alpha": json_float(self.alpha),
            "lower_is_better": self.lower_is_better,
            "reason": self.reason,
            "method": self.method,
            "blocks": self.blocks,
        }


def _ratio(candidate: float, baseline: float) -> float:
    if baseline == 0.0:
        return 1.0 if candidate == 0.0 else math.inf
    return candidate / baseline


def _as_samples(values: Sequence[float] | np.ndarray, side: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{side} samples contain NaN or inf")
    if np.any(arr < 0):
        # Medians of mixed-sign samples make the ratio meaningless.
        raise ValueError(f"{side} samples must be non-negative (times, throughputs)")
    return arr


_MEDIANS_AT_ONCE = 1 << 20
"""Resampled values drawn and gathered at a time for their medians (a few MiB)."""


def _resampled_medians(rng: np.random.Generator, values: np.ndarray, n_bootstrap: int) -> np.ndarray:
    """The medians of ``n_bootstrap`` resamples (with replacement) of ``values``, drawn from ``rng``.

    Bounded in memory: a block of resamples at a time, from int32 indices. numpy's generator draws a
    bounded integer under 2**32 from one 32-bit word of its stream, which it keeps across calls, for
    int32 and int64 alike: these are the resamples of one int64 draw of them all, without its 8 bytes
    an index and the gathered copy beside them (hundreds of MiB for the thousands of steps of a long
    capture)."""
    n = values.size
    rows = max(1, _MEDIANS_AT_ONCE // max(n, 1))
    out = np.empty(n_bootstrap)
    for a in range(0, n_bootstrap, rows):
        block = rng.integers(0, n, size=(min(rows, n_bootstrap - a), n), dtype=np.int32)
        out[a:a + len(block)] = np.median(values[block], axis=1)
    return out


def _bootstrap_ratio_ci(
    baseline: np.ndarray, candidate: np.ndarray, *, alpha: float, n_bootstrap: int, seed: int
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    # Resample each side independently (the runs are independent), the baseline's first.
    b_med = _resampled_medians(rng, baseline, n_bootstrap)
    c_med = _resampled_medians(rng, candidate, n_bootstrap)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(b_med == 0.0, np.where(c_med == 0.0, 1.0, np.inf), c_med / b_med)
    # No interpolation between order statistics: it would turn inf (zero baseline medians) into NaN.
    low, high = np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0], method="inverted_cdf")
    return float(low), float(high)


def _validate(min_effect: float, alpha: float) -> None:
    if not min_effect >= 0.0:
        raise ValueError(f"min_effect must be >= 0, got {min_effect}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def compare_samples(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    min_effect: float,
    alpha: float = DEFAULT_ALPHA,
    lower_is_better: bool = True,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
    seed: int = 0,
) -> SampleComparison:
    """Compare two independent samples of one quantity (e.g. per-step times in microseconds).

    Args:
        baseline: samples of the reference (non-negative, finite).
        candidate: samples of the change under test.
        min_effect: the smallest relative change of the median that matters, as a fraction
            (0.05 = 5%); smaller real changes are reported as no change or inconclusive.
        alpha: significance level of the Mann-Whitney U test; the bootstrap CI is at ``1 - alpha``.
        lower_is_better: True for times (a larger candidate is a regression), False for throughputs.
        min_samples: fewer samples than this on either side is inconclusive without testing.
        n_bootstrap: bootstrap resamples for the CI.
        seed: seed of the bootstrap; fixed so that the same samples give the same outcome.

    Returns:
        A :class:`SampleComparison`; the module docstring says how the outcome is decided.

    Raises:
        ValueError: samples that are NaN, inf or negative; ``min_effect < 0``; ``alpha`` not in (0, 1).
    """
    _validate(min_effect, alpha)
    b = _as_samples(baseline, "baseline")
    c = _as_samples(candidate, "candidate")
    b_med = float(np.median(b)) if b.size else math.nan
    c_med = float(np.median(c)) if c.size else math.nan

    def result(outcome: Outcome, ratio: float, ci: tuple[float, float], p: float, reason: str) -> SampleComparison:
        return SampleComparison(
            outcome=outcome, ratio=ratio, ci_low=ci[0], ci_high=ci[1], p_value=p,
            baseline_median=b_med, candidate_median=c_med, n_baseline=int(b.size), n_candidate=int(c.size),
            min_effect=min_effect, alpha=alpha, lower_is_better=lower_is_better, reason=reason,
        )

    if b.size < min_samples or c.size < min_samples:
        ratio = _ratio(c_med, b_med) if b.size and c.size else math.nan
        return result(
            Outcome.INCONCLUSIVE, ratio, (math.nan, math.nan), math.nan,
            f"too few samples to test ({b.size} baseline, {c.size} candidate; need {min_samples} each)",
        )

    ratio = _ratio(c_med, b_med)
    if np.all(b == b[0]) and np.all(c == b[0]):
        # Identical constant samples: the test is undefined, the answer is not.
        return result(Outcome.NO_CHANGE, 1.0, (1.0, 1.0), 1.0, "all samples are identical")
    # scipy (0.5-1 s to import) only where a test runs: not for too few samples or constant ones.
    from scipy import stats

    p_value = float(stats.mannwhitneyu(c, b, alternative="two-sided").pvalue)
    ci_low, ci_high = _bootstrap_ratio_ci(b, c, alpha=alpha, n_bootstrap=n_bootstrap, seed=seed)
    upper = 1.0 + min_effect
    lower = 1.0 / upper
    significant = p_value < alpha
    ci_pct = f"{(1 - alpha) * 100:.4g}% CI of the ratio [{ci_low:.3f}, {ci_high:.3f}]"
    change = f"{(ratio - 1.0) * 100.0:+.1f}%"

    # "Higher" and "lower" in ratio terms; which of them is worse depends on the quantity.
    went_up = significant and ratio >= upper and ci_low > 1.0
    went_down = significant and ratio <= lower and ci_high < 1.0
    if went_up or went_down:
        worse = went_up if lower_is_better else went_down
        outcome = Outcome.REGRESSED if worse else Outcome.IMPROVED
        return result(
            outcome, ratio, (ci_low, ci_high), p_value,
            f"median changed {change} (p={p_value:.2g}, {ci_pct}); beyond the minimum effect of {min_effect:.0%}",
        )
    if lower < ci_low and ci_high < upper:
        return result(
            Outcome.NO_CHANGE, ratio, (ci_low, ci_high), p_value,
            f"median changed {change}; the {ci_pct} rules out a change of {min_effect:.0%} or more",
        )
    if not significant:
        why = f"median changed {change} but not significantly (p={p_value:.2g} >= {alpha})"
    elif abs(math.log(ratio)) < math.log(upper):
        why = f"median changed {change} (p={p_value:.2g}), below the minimum effect of {min_effect:.0%}"
    else:
        why = f"median changed {change} (p={p_value:.2g}) but the CI reaches across 1"
    return result(
        Outcome.INCONCLUSIVE, ratio, (ci_low, ci_high), p_value,
        f"{why}; the {ci_pct} neither shows nor rules out a change of {min_effect:.0%}",
    )


def compare_point_estimates(
    baseline: float, candidate: float, *, min_effect: float, lower_is_better: bool = True
) -> SampleComparison:
    """Compare two single values when no per-step samples exist: no test, only the threshold.

    ``regressed`` / ``improved`` when the ratio is beyond ``1 + min_effect`` (or its inverse) on the
    worse / better side, else ``no change``. ``p_value`` and the CI are NaN, and ``reason`` says that
    noise could not be judged.
    """
    _validate(min_effect, DEFAULT_ALPHA)
    for side, value in (("baseline", baseline), ("candidate", candidate)):
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"{side} value must be finite and non-negative, got {value}")
    ratio = _ratio(candidate, baseline)
    upper = 1.0 + min_effect
    if ratio >= upper or ratio <= 1.0 / upper:
        up = ratio >= upper
        outcome = Outcome.REGRESSED if up == lower_is_better else Outcome.IMPROVED
    else:
        outcome = Outcome.NO_CHANGE
    return SampleComparison(
        outcome=outcome, ratio=ratio, ci_low=math.nan, ci_high=math.nan, p_value=math.nan,
        baseline_median=float(baseline), candidate_median=float(candidate), n_baseline=1, n_candidate=1,
        min_effect=min_effect, alpha=math.nan, lower_is_better=lower_is_better,
        reason=(
            f"changed {(ratio - 1.0) * 100.0:+.1f}% (single values, no per-step samples: noise not judged; "
            f"minimum effect {min_effect:.0%})"
        ),
    )
