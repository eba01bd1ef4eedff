"""compare_samples / compare_point_estimates: outcomes, symmetry, calibration, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hlo_doctor import statistics
from hlo_doctor.statistics import Outcome, compare_point_estimates, compare_samples


def _lognormal(seed: int, median: float, sigma: float, n: int) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(math.log(median), sigma, n)


def test_clear_slowdown_is_regressed_and_swapped_is_improved() -> None:
    base = _lognormal(1, 1000.0, 0.05, 40)
    cand = _lognormal(2, 1300.0, 0.05, 40)
    r = compare_samples(base, cand, min_effect=0.05)
    assert r.outcome is Outcome.REGRESSED
    assert 1.2 < r.ratio < 1.4 and r.ci_low > 1.05 and r.p_value < 1e-6
    assert r.change_pct == pytest.approx((r.ratio - 1) * 100)
    swapped = compare_samples(cand, base, min_effect=0.05)
    assert swapped.outcome is Outcome.IMPROVED
    assert swapped.ratio == pytest.approx(1 / r.ratio)


def test_higher_is_better_flips_the_direction() -> None:
    base = _lognormal(3, 100.0, 0.03, 30)
    cand = _lognormal(4, 80.0, 0.03, 30)  # throughput fell by 20%
    assert compare_samples(base, cand, min_effect=0.05, lower_is_better=False).outcome is Outcome.REGRESSED
    assert compare_samples(base, cand, min_effect=0.05).outcome is Outcome.IMPROVED


def test_same_distribution_with_enough_samples_is_no_change() -> None:
    r = compare_samples(_lognormal(5, 1000.0, 0.02, 60), _lognormal(6, 1000.0, 0.02, 60), min_effect=0.05)
    assert r.outcome is Outcome.NO_CHANGE
    assert 1 / 1.05 < r.ci_low <= r.ratio <= r.ci_high < 1.05
    assert "rules out" in r.reason


def test_noisy_samples_are_inconclusive_not_regressed() -> None:
    # +8% in the median but with 40% spread and few samples: neither shown nor ruled out.
    r = compare_samples(_lognormal(7, 1000.0, 0.4, 8), _lognormal(8, 1080.0, 0.4, 8), min_effect=0.05)
    assert r.outcome is Outcome.INCONCLUSIVE
    assert r.ci_low < 1.0 < r.ci_high


def test_real_but_small_change_is_not_a_regression() -> None:
    # A real +2% shift with a 10% minimum effect: significant, but it does not count.
    base = _lognormal(9, 1000.0, 0.005, 200)
    cand = _lognormal(10, 1020.0, 0.005, 200)
    r = compare_samples(base, cand, min_effect=0.10)
    assert r.p_value < 0.001
    assert r.outcome is Outcome.NO_CHANGE


def test_too_few_samples_is_inconclusive() -> None:
    r = compare_samples([1.0, 2.0], [5.0, 6.0, 7.0], min_effect=0.05)
    assert r.outcome is Outcome.INCONCLUSIVE and "too few samples" in r.reason
    assert r.ratio == pytest.approx(6.0 / 1.5) and not r.tested


def test_identical_constant_samples_are_no_change() -> None:
    r = compare_samples([7.0] * 10, [7.0] * 10, min_effect=0.05)
    assert (r.outcome, r.ratio, r.ci_low, r.ci_high) == (Outcome.NO_CHANGE, 1.0, 1.0, 1.0)


def test_zero_baseline_gives_infinite_ratio_and_valid_json() -> None:
    r = compare_samples([0.0] * 10, [5.0] * 10, min_effect=0.05)
    assert r.outcome is Outcome.REGRESSED and math.isinf(r.ratio)
    json.dumps(r.to_dict(), allow_nan=False)


def test_deterministic_for_the_same_input() -> None:
    base, cand = _lognormal(11, 1000.0, 0.2, 20), _lognormal(12, 1050.0, 0.2, 20)
    assert compare_samples(base, cand, min_effect=0.05) == compare_samples(base, cand, min_effect=0.05)


def test_false_alarm_rate_under_the_null_is_at_most_alpha() -> None:
    # 300 A/A comparisons of one noisy distribution: a regression verdict is a false alarm.
    alarms = 0
    for i in range(300):
        base = _lognormal(1000 + 2 * i, 1000.0, 0.1, 15)
        cand = _lognormal(1001 + 2 * i, 1000.0, 0.1, 15)
        alarms += compare_samples(base, cand, min_effect=0.02).outcome is Outcome.REGRESSED
    assert alarms / 300 <= 0.05


def test_detects_a_twenty_percent_slowdown_in_noise() -> None:
    hits = 0
    for i in range(50):
        base = _lognormal(5000 + 2 * i, 1000.0, 0.1, 20)
        cand = _lognormal(5001 + 2 * i, 1200.0, 0.1, 20)
        hits += compare_samples(base, cand, min_effect=0.05).outcome is Outcome.REGRESSED
    assert hits >= 45


def test_point_estimates() -> None:
    assert compare_point_estimates(100.0, 120.0, min_effect=0.05).outcome is Outcome.REGRESSED
    assert compare_point_estimates(100.0, 103.0, min_effect=0.05).outcome is Outcome.NO_CHANGE
    assert compare_point_estimates(100.0, 80.0, min_effect=0.05).outcome is Outcome.IMPROVED
    r = compare_point_estimates(100.0, 80.0, min_effect=0.05, lower_is_better=False)
    assert r.outcome is Outcome.REGRESSED and not r.tested and "noise not judged" in r.reason
    json.dumps(r.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    ("base", "cand", "kw", "message"),
    [
        ([1.0, math.nan], [1.0], {}, "NaN"),
        ([1.0], [-1.0], {}, "non-negative"),
        ([1.0], [1.0], {"min_effect": -0.1}, "min_effect"),
        ([1.0], [1.0], {"alpha": 1.5}, "alpha"),
    ],
)
def test_bad_input_raises_value_error(base, cand, kw, message) -> None:
    kwargs = {"min_effect": 0.05, **kw}
    with pytest.raises(ValueError, match=message):
        compare_samples(base, cand, **kwargs)


def _whole_draw_ci(baseline: np.ndarray, candidate: np.ndarray, alpha: float, n_bootstrap: int,
                   seed: int) -> tuple[float, float]:
    """The bootstrap interval as numpy's whole draws give it: every resample's int64 indices at once."""
    rng = np.random.default_rng(seed)
    b_med = np.median(baseline[rng.integers(0, baseline.size, size=(n_bootstrap, baseline.size))], axis=1)
    c_med = np.median(candidate[rng.integers(0, candidate.size, size=(n_bootstrap, candidate.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(b_med == 0.0, np.where(c_med == 0.0, 1.0, np.inf), c_med / b_med)
    low, high = np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0], method="inverted_cdf")
    return float(low), float(high)


@pytest.mark.parametrize(("nb", "nc"), [(1, 1), (5, 5), (7, 3), (2, 9), (131, 100), (4999, 3001)])
def test_the_bounded_bootstrap_draws_the_whole_draws_resamples(nb: int, nc: int) -> None:
    """The interval, taken a block of resamples at a time from int32 indices (a few MiB, not hundreds
    for thousands of steps), is the one numpy's whole int64 draw gives: the same resamples."""
    rng = np.random.default_rng(nb * 1000 + nc)
    b, c = rng.gamma(2.0, 100.0, nb), rng.gamma(2.0, 100.0, nc)
    if nb == 2:
        b[:] = 0.0
    for seed in (0, 3):
        got = statistics._bootstrap_ratio_ci(b, c, alpha=0.05, n_bootstrap=2000, seed=seed)
        assert got == _whole_draw_ci(b, c, 0.05, 2000, seed)


def test_the_bootstrap_in_many_blocks_is_the_whole_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 1, 3 or 7 resamples of odd sizes (the generator's stream carried across its calls):
    the whole draw's interval still."""
    rng = np.random.default_rng(5)
    b, c = rng.gamma(2.0, 100.0, 999), rng.gamma(2.0, 110.0, 1001)
    whole = _whole_draw_ci(b, c, 0.05, 300, 0)
    for rows in (1, 3, 7):
        monkeypatch.setattr(statistics, "_MEDIANS_AT_ONCE", rows * 999)
        assert statistics._bootstrap_ratio_ci(b, c, alpha=0.05, n_bootstrap=300, seed=0) == whole
