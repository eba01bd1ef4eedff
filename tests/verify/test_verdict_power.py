"""Check 5's statistic: per-step times with rounds as blocks (paired rounds), on synthetic rounds with a
known effect and a known round-to-round drift, and the budget's stopping rule on a fake clock."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hlo_doctor.statistics import Outcome, compare_samples
from hlo_doctor.verify.checks import check_step_verdict
from hlo_doctor.verify.results import Stopping
from hlo_doctor.verify.rounds import interleaved, run_rounds
from hlo_doctor.verify.stats import MIN_PAIRS, alpha_at_look, compare_blocks

PAIRS, STEPS = 6, 15  # verify's defaults: 6 rounds a side, 16 tokens = 15 decode steps per round


def synthetic(rng: np.random.Generator, *, effect: float, drift: float, noise: float, pairs: int = PAIRS,
              steps: int = STEPS) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Rounds of step times (ms): every round shifted by its own drift (lognormal, sd ``drift``), shared
    by all its steps; each step with its own noise (sd ``noise``); the treatment's steps x ``effect``."""
    def round_(scale: float) -> np.ndarray:
        return 10.0 * scale * math.exp(rng.normal(0, drift)) * np.exp(rng.normal(0, noise, steps))

    base = [round_(1.0) for _ in range(pairs)]
    treat = [round_(effect) for _ in range(pairs)]
    return base, treat


def test_round_drift_does_not_make_an_aa_run_significant() -> None:
    # 4% round-to-round drift, 1% step noise: pooled as independent steps, A/A runs look "significant".
    rng = np.random.default_rng(7)
    runs = [synthetic(rng, effect=1.0, drift=0.04, noise=0.01) for _ in range(150)]
    blocked = [compare_blocks(b, t, min_effect=0.02) for b, t in runs]
    pooled = [compare_samples(np.concatenate(b), np.concatenate(t), min_effect=0.02, n_bootstrap=200) for b, t in runs]
    false_blocked = sum(r.outcome in (Outcome.REGRESSED, Outcome.IMPROVED) for r in blocked) / len(runs)
    false_pooled = sum(r.outcome in (Outcome.REGRESSED, Outcome.IMPROVED) for r in pooled) / len(runs)
    significant_pooled = sum(r.p_value < 1e-3 for r in pooled) / len(runs)
    assert false_blocked <= 0.1, false_blocked  # alpha = 0.05 (4.9% over 2,000 such runs), 150 runs here
    assert false_pooled >= 0.3 and significant_pooled >= 0.3, (false_pooled, significant_pooled)
    assert all(r.method == "paired rounds" and r.blocks == PAIRS for r in blocked)


def test_drift_shared_by_the_two_rounds_of_a_pair_cancels() -> None:
    # A slow trend over the whole run (+3% per pair) and one loaded pair (+30%): the pairs cancel both.
    rng = np.random.default_rng(1)
    base, treat = [], []
    for pair in range(PAIRS):
        load = 1.3 if pair == 2 else 1.0 + 0.03 * pair
        base.append(10.0 * load * np.exp(rng.normal(0, 0.01, STEPS)))
        treat.append(10.0 * load * 1.05 * np.exp(rng.normal(0, 0.01, STEPS)))
    r = compare_blocks(base, treat, min_effect=0.02)
    assert r.outcome is Outcome.REGRESSED and abs(r.ratio - 1.05) < 0.01 and r.ci_low > 1.03, r


@pytest.mark.parametrize(("effect", "outcome"), [(1.05, Outcome.REGRESSED), (1 / 1.05, Outcome.IMPROVED),
                                                 (0.889, Outcome.IMPROVED)])
def test_a_five_percent_change_with_low_noise_decides(effect: float, outcome: Outcome) -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        base, treat = synthetic(rng, effect=effect, drift=0.003, noise=0.02)
        r = compare_blocks(base, treat, min_effect=0.02)
        assert r.outcome is outcome, r.reason


def test_an_aa_run_with_low_noise_is_no_change() -> None:
    # The t-interval's width is itself estimated from 6 pairs: now and then it is too wide to rule out
    # 2% (inconclusive), never a change.
    rng = np.random.default_rng(3)
    outcomes = [compare_blocks(*synthetic(rng, effect=1.0, drift=0.003, noise=0.02), min_effect=0.02).outcome
                for _ in range(40)]
    assert outcomes.count(Outcome.NO_CHANGE) >= 36 and set(outcomes) <= {Outcome.NO_CHANGE, Outcome.INCONCLUSIVE}


def test_a_change_of_five_percent_with_p_below_1e3_is_never_inconclusive() -> None:
    # Whatever the drift and the noise, the t-test and the t-interval agree: significant beyond the
    # minimum effect is decided.
    rng = np.random.default_rng(11)
    seen = 0
    for _ in range(400):
        effect = float(rng.choice([0.9, 0.95, 1.05, 1.1]))
        base, treat = synthetic(rng, effect=effect, drift=float(rng.uniform(0, 0.06)),
                                noise=float(rng.uniform(0.005, 0.2)))
        r = compare_blocks(base, treat, min_effect=0.02)
        if r.p_value < 1e-3 and abs(math.log(r.ratio)) >= math.log(1.05):
            seen += 1
            assert r.outcome is not Outcome.INCONCLUSIVE, r.reason
        if r.p_value < r.alpha:
            assert r.ci_low > 1 or r.ci_high < 1, r  # the interval excludes 1 exactly when p < alpha
    assert seen > 50


def test_too_few_pairs_and_bad_rounds() -> None:
    base = [[10.0, 10.1]] * (MIN_PAIRS - 1)
    r = compare_blocks(base, [[12.0, 12.1]] * (MIN_PAIRS - 1), min_effect=0.02)
    assert r.outcome is Outcome.INCONCLUSIVE and "too few pairs" in r.reason and math.isnan(r.p_value)
    assert compare_blocks([[10.0]] * 4, [[10.0]] * 4, min_effect=0.02).outcome is Outcome.NO_CHANGE
    same = compare_blocks([[10.0]] * 4, [[11.0]] * 4, min_effect=0.02)  # every pair exactly +10%
    assert same.outcome is Outcome.REGRESSED and same.ci_low == pytest.approx(1.1)
    empty = compare_blocks([[1.0], [], [1.0]], [[1.0], [1.0], [1.0]], min_effect=0.02)
    assert empty.outcome is Outcome.INCONCLUSIVE and empty.reason == "no samples in baseline round 2"
    with pytest.raises(ValueError, match="positive"):
        compare_blocks([[1.0], [0.0]], [[1.0], [1.0]], min_effect=0.02)
    doc = r.to_dict()
    assert doc["method"] == "paired rounds" and doc["blocks"] == MIN_PAIRS - 1


def test_looks_spend_at_most_alpha() -> None:
    assert sum(alpha_at_look(0.05, j) for j in range(1, 10_000)) < 0.05
    assert alpha_at_look(0.05, 1) == pytest.approx(0.05 * 6 / math.pi ** 2)


class FakeClock:
    """Each measured round takes ``round_s`` seconds."""

    def __init__(self, round_s: float) -> None:
        self.now, self.round_s = 0.0, round_s

    def __call__(self) -> float:
        return self.now


def test_budget_adds_pairs_until_decided_or_spent() -> None:
    clock = FakeClock(2.0)
    order: list[str] = []

    def measure(label: str, position: int) -> None:
        assert position == len(order)
        order.append(label)
        clock.now += clock.round_s

    # No budget: exactly the settings' pairs.
    stop = run_rounds(3, measure, clock=clock)
    assert order == list(interleaved(3)) and stop.rounds == 3 and stop.reason == "fixed"
    assert stop.describe() == "3 rounds a side"
    # Decided at the third look: pairs grow x1.5 between looks (3, 5, 8), in the same alternating order.
    order.clear()
    looks: list[int] = []
    stop = run_rounds(3, measure, budget_s=100, decided=lambda look: looks.append(len(order)) or look == 3,
                      clock=clock)
    assert looks == [6, 10, 16] and order == list(interleaved(8))
    assert stop.rounds == 8 and stop.looks == 3 and stop.reason == "decided"
    assert stop.describe().startswith("decided at round 8 (budget 100 s")
    # Never decided: pairs of 4 s are added while they fit in 20 s (3 pairs = 12 s, then 2 more: 20 s).
    order.clear()
    stop = run_rounds(3, measure, budget_s=20, decided=lambda look: False, clock=clock)
    assert stop.rounds == 5 and stop.spent_s == 20 and stop.reason == "budget spent"
    assert stop.to_dict()["text"] == "budget spent at round 5 (budget 20 s, 20 s used)"


def test_check_five_decides_on_the_steps_and_fails_a_throughput_regression() -> None:
    rng = np.random.default_rng(5)
    base, treat = synthetic(rng, effect=0.9, drift=0.005, noise=0.02)
    step = compare_blocks(base, treat, min_effect=0.02)
    thr_same = compare_blocks([[1000.0 * x] for x in (1, 1.01, 0.99, 1, 1.02, 0.98)],
                              [[1000.0 * x] for x in (1, 0.99, 1.01, 1, 0.98, 1.02)], min_effect=0.02,
                              lower_is_better=False)
    thr_down = compare_blocks([[1000.0 * x] for x in (1, 1.01, 0.99, 1, 1.02, 0.98)],
                              [[800.0 * x] for x in (1, 0.99, 1.01, 1, 0.98, 1.02)], min_effect=0.02,
                              lower_is_better=False)
    stop = Stopping(6, 6, None, 10.0, False)
    ok = check_step_verdict(step, thr_same, False, stop)
    assert ok.passed and ok.figure.startswith("improved: step x0.9") and "6 rounds a side" in ok.figure
    assert thr_down.outcome is Outcome.REGRESSED
    assert not check_step_verdict(step, thr_down, False, stop).passed
    assert not check_step_verdict(compare_blocks(base, base, min_effect=0.02), None, True).passed
