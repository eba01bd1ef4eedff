"""Verify's statistics: every figure of every kind of target goes through here.

Two comparisons, both with the settings' minimum effect and significance level:

- :func:`compare`: :func:`hlo_doctor.statistics.compare_samples` (Mann-Whitney U and a bootstrap CI
  of the median ratio), for figures with one value per round that are only reported (batch TTFT) and
  for targets that have no rounds of steps;
- :func:`compare_blocks` / :func:`compare_rounds`: the **paired-rounds** comparison that decides
  check 5. Its unit is the pair of interleaved rounds (AB, then BA, ...), not the step.

Why pairs of rounds
-------------------
The steps of one round share that round's machine: its load, clock, caches, scheduler. On a shared
machine a round can run a few percent slower or faster than the next one, for every step in it. Pooling
every step of every round as if each were an independent draw counts that round-to-round drift as
signal (an A/A run then looks "significant"); comparing one number per round (the round's
throughput) throws the steps' precision away (6 values a side, each carrying the prefill and the
host too). The paired-rounds comparison keeps both:

1. each round is summarised by the 20%-trimmed mean of its log step times (a geometric mean without
   the fastest and slowest fifth: a slow step from GC or a scheduler hiccup does not move it, and it
   keeps more of the steps' precision than the median), so the steps' precision goes into the round's
   figure;
2. pair ``i`` is the baseline's round ``i`` and the treatment's round ``i``, which ran back to back;
   its log-ratio ``d_i = m_T_i - m_B_i`` (``m``: a round's figure, in logs) cancels whatever drift
   the two rounds shared;
3. the ``d_i`` are compared with 0 by a one-sample **t-test** with ``k - 1`` degrees of freedom
   (``k`` pairs): the pair-to-pair spread of ``d_i`` (drift between the two rounds of a pair plus the
   step noise left in the rounds' figures) is the noise the effect is judged against. The ratio is
   ``exp(mean d_i)`` (the geometric mean of the pairs' ratios) and the CI is the matching t-interval,
   ``exp(mean d_i +- t(1 - alpha/2, k - 1) * sd(d_i) / sqrt(k))``.

This is the blocked (mixed-model) analysis of the design: with a random effect per round and a fixed
effect per pair, the treatment effect of a balanced design is tested on exactly these within-pair
contrasts. The p-value and the CI come from the same t distribution, so ``p < alpha`` if and only if
the CI excludes 1: a change at least as large as the minimum effect with ``p < alpha`` is always
``improved`` or ``regressed``, never ``inconclusive``. Fewer than :data:`MIN_PAIRS` pairs is
``inconclusive`` without testing.

Adding rounds until the interval decides (``--budget``) looks at the data more than once (after the
first pairs, then each time the pairs have grown by half: :func:`hlo_doctor.verify.rounds.run_rounds`);
each look ``j`` (1, 2, ...) then tests at :func:`alpha_at_look` ``= alpha * 6 / (pi^2 * j^2)``, whose
sum over any number of looks is ``alpha``, so the false-alarm rate stays at most ``alpha`` however many
rounds the budget allows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from hlo_doctor.statistics import Outcome, SampleComparison, compare_samples
from hlo_doctor.verify import settings as shared
from hlo_doctor.verify.settings import MeasureSettings

if TYPE_CHECKING:
    from hlo_doctor.lint.measurement import Measurement
    from hlo_doctor.lint.store import MeasurementStore

__all__ = ["MIN_PAIRS", "alpha_at_look", "compare", "compare_blocks", "compare_rounds", "rounds_measurement"]

MIN_PAIRS = 3
"""Pairs of rounds below which the paired-rounds comparison does not test (a t-test on 2 pairs has
1 degree of freedom: its 95% interval is +-12.7 standard errors)."""

METHOD = "paired rounds"
TRIM = 0.2
"""Fraction of a round's steps cut from each end before averaging (3 of 15 decode steps)."""


def compare(settings: MeasureSettings, baseline: Sequence[float], treatment: Sequence[float], *,
            lower_is_better: bool = True, alpha: float | None = None) -> SampleComparison:
    """``compare_samples`` with the settings' effect size, alpha (or ``alpha``: a look's) and seed."""
    return compare_samples(baseline, treatment, min_effect=settings.min_effect,
                           alpha=settings.alpha if alpha is None else alpha,
                           lower_is_better=lower_is_better, seed=settings.seed)


def alpha_at_look(alpha: float, look: int) -> float:
    """The significance level of look ``look`` (from 1) when rounds are added until the data decide:
    ``alpha * 6 / (pi^2 * look^2)``, which sums to ``alpha`` over every look."""
    if look < 1:
        raise ValueError(f"look must be >= 1, got {look}")
    return alpha * 6.0 / (math.pi ** 2 * look ** 2)


def compare_rounds(settings: MeasureSettings, baseline: Sequence[Sequence[float]],
                   treatment: Sequence[Sequence[float]], *, lower_is_better: bool = True,
                   alpha: float | None = None) -> SampleComparison:
    """:func:`compare_blocks` with the settings' minimum effect and alpha (or ``alpha``: a look's)."""
    return compare_blocks(baseline, treatment, min_effect=settings.min_effect,
                          alpha=settings.alpha if alpha is None else alpha, lower_is_better=lower_is_better)


def _block_figures(blocks: Sequence[Sequence[float]], side: str) -> np.ndarray:
    """Each round's trimmed mean of its log samples (a round of one sample: that sample's log)."""
    meds = []
    for i, block in enumerate(blocks):
        arr = np.asarray(block, dtype=np.float64).ravel()
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"{side} round {i + 1}: samples must be finite and positive (times, throughputs)")
        meds.append(float(stats.trim_mean(np.log(arr), TRIM)))
    return np.asarray(meds)


def compare_blocks(baseline: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]], *,
                   min_effect: float, alpha: float = 0.05, lower_is_better: bool = True,
                   min_pairs: int = MIN_PAIRS) -> SampleComparison:
    """Compare the candidate with the baseline round by round, ``baseline[i]`` paired with
    ``candidate[i]`` (two rounds that ran back to back), each round a sequence of samples.

    The module docstring says how: per-round trimmed means of the log samples, their differences
    within pairs, a one-sample t-test and its t-interval. The outcome follows :func:`hlo_doctor.statistics.compare_samples`' rules (regressed /
    improved: significant and beyond the minimum effect; no change: the CI inside the band; else
    inconclusive). ``n_baseline``/``n_candidate`` count the samples, ``blocks`` the pairs; the medians
    are over every sample of a side.

    A round without samples makes the comparison inconclusive (the reason names it).

    Raises:
        ValueError: samples that are not finite and positive, ``min_effect < 0`` or ``alpha`` not in (0, 1).
    """
    if not min_effect >= 0.0:
        raise ValueError(f"min_effect must be >= 0, got {min_effect}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    empty = [f"{side} round {i + 1}" for side, blocks in (("baseline", baseline), ("candidate", candidate))
             for i, block in enumerate(blocks) if len(block) == 0]
    if empty:
        # A round without samples (an engine that reports no step times) cannot be judged: say so.
        return SampleComparison(Outcome.INCONCLUSIVE, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan,
                                0, 0, min_effect, alpha, lower_is_better, f"no samples in {', '.join(empty)}",
                                method=METHOD, blocks=0)
    b_meds = _block_figures(baseline, "baseline")
    c_meds = _block_figures(candidate, "candidate")
    b_all = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in baseline]) if len(baseline) else np.zeros(0)
    c_all = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in candidate]) if len(candidate) else np.zeros(0)
    k = min(b_meds.size, c_meds.size)

    def result(outcome: Outcome, ratio: float, ci: tuple[float, float], p: float, reason: str) -> SampleComparison:
        return SampleComparison(
            outcome=outcome, ratio=ratio, ci_low=ci[0], ci_high=ci[1], p_value=p,
            baseline_median=float(np.median(b_all)) if b_all.size else math.nan,
            candidate_median=float(np.median(c_all)) if c_all.size else math.nan,
            n_baseline=int(b_all.size), n_candidate=int(c_all.size), min_effect=min_effect, alpha=alpha,
            lower_is_better=lower_is_better, reason=reason, method=METHOD, blocks=int(k),
        )

    d = c_meds[:k] - b_meds[:k]
    ratio = float(np.exp(d.mean())) if k else math.nan
    if k < min_pairs:
        return result(Outcome.INCONCLUSIVE, ratio, (math.nan, math.nan), math.nan,
                      f"too few pairs of rounds to test ({k}; need {min_pairs})")
    if np.all(d == 0.0):
        return result(Outcome.NO_CHANGE, 1.0, (1.0, 1.0), 1.0, "every pair of rounds measured the same")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(k)
    if se == 0.0:
        # Every pair shows exactly the same ratio: no spread to judge it against, and none needed.
        p_value, half = 0.0, 0.0
    else:
        p_value = float(2.0 * stats.t.sf(abs(mean) / se, k - 1))
        half = float(stats.t.ppf(1.0 - alpha / 2.0, k - 1)) * se
    ci_low, ci_high = math.exp(mean - half), math.exp(mean + half)
    upper = 1.0 + min_effect
    lower = 1.0 / upper
    significant = p_value < alpha
    ci_pct = f"{(1 - alpha) * 100:.4g}% CI [{ci_low:.3f}, {ci_high:.3f}]"
    change = f"{(ratio - 1.0) * 100.0:+.1f}%"
    over = f"over {k} pairs of rounds (t-test on the per-pair ratios, p={p_value:.2g})"
    # The t-interval and the t-test agree: significant means the CI excludes 1.
    went_up = significant and ratio >= upper
    went_down = significant and ratio <= lower
    if went_up or went_down:
        worse = went_up if lower_is_better else went_down
        return result(Outcome.REGRESSED if worse else Outcome.IMPROVED, ratio, (ci_low, ci_high), p_value,
                      f"changed {change} {over}, {ci_pct}; beyond the minimum effect of {min_effect:.0%}")
    if lower < ci_low and ci_high < upper:
        return result(Outcome.NO_CHANGE, ratio, (ci_low, ci_high), p_value,
                      f"changed {change} {over}; the {ci_pct} rules out a change of {min_effect:.0%} or more")
    if not significant:
        why = f"changed {change} {over}, not significant at {alpha:.2g}"
    else:
        why = f"changed {change} {over}, below the minimum effect of {min_effect:.0%}"
    return result(Outcome.INCONCLUSIVE, ratio, (ci_low, ci_high), p_value,
                  f"{why}; the {ci_pct} neither shows nor rules out a change of {min_effect:.0%}")


@dataclass(frozen=True, slots=True)
class _Defaults:
    """verify's defaults: the minimum effect and alpha every kind of target starts from."""

    min_effect: float = shared.DEFAULT_MIN_EFFECT
    alpha: float = shared.DEFAULT_ALPHA
    seed: int = 0


def rounds_measurement(kind: str, key: str, doc: Mapping[str, object], budget_s: float,
                       store: MeasurementStore | None) -> Measurement | str:
    """A promise's rounds (a program's or an engine's A/B, ``doc["baseline"]``/``["treatment"]``: step
    times in ms, round by round) as a stored measurement: the step-time statistic on them (the paired
    rounds' ratio, its interval at the last look's level, the outcome), each side's step times in us
    round after round, the looks and why it stopped; or why it cannot be one."""
    from hlo_doctor.lint.measurement import Measurement, now_utc
    from hlo_doctor.lint.program_ab import OUTCOMES
    from hlo_doctor.lint.store import MeasurementStore

    base = [[1e3 * t for t in r] for r in doc["baseline"]]  # type: ignore[attr-defined]
    treat = [[1e3 * t for t in r] for r in doc["treatment"]]  # type: ignore[attr-defined]
    looks = int(doc.get("looks", 1))  # type: ignore[call-overload]
    settings = _Defaults()
    # The level the rounds were judged at where the doc says (verify's own rounds: its verdict's), else
    # the last look's of rounds added until they decide.
    alpha = float(doc["alpha"]) if "alpha" in doc else alpha_at_look(settings.alpha, max(1, looks))  # type: ignore[arg-type]
    c = compare_rounds(settings, base, treat, alpha=alpha)
    if not (math.isfinite(c.ci_low) and math.isfinite(c.ci_high) and math.isfinite(c.ratio)):
        return "the rounds were too few to test the difference"
    outcome = OUTCOMES.index(str(c.outcome)) if str(c.outcome) in OUTCOMES else len(OUTCOMES) - 1
    return Measurement(kind=kind, key=key, samples=(("baseline", tuple(t for r in base for t in r)),
                                                    ("treatment", tuple(t for r in treat for t in r)),
                                                    ("looks", (float(looks),)), ("outcome", (float(outcome),))),
                       median=c.ratio, low=min(c.ci_low, c.ratio), high=max(c.ci_high, c.ratio), level=1.0 - c.alpha,
                       reps=len(base), when=now_utc(), identity=(store or MeasurementStore(None)).identity(), unit="ratio",
                       budget_s=budget_s, stopped=str(doc.get("stopped", "")))
