"""The replay's statistic: paired differences of alternated runs, their median and its interval.

Each pair times the original (A) and the changed program (B) back to back, in alternating order
(AB, BA, AB...), so a load that drifts over the run falls on both sides of a pair. The saving is
the median of the pairs' differences A - B, with a distribution-free interval of that median from
the order statistics of the differences (the sign test's: ranks where the binomial(n, 1/2) tails
hold ``alpha``/2 each): no assumption of a shape for the noise of a loaded machine.

Pairs are added until the interval decides (:func:`decision`), as ``verify --budget`` adds rounds:
looks come when the pairs have grown by :data:`GROWTH`, and look ``k`` spends
``alpha * 6 / (pi^2 k^2)`` of the error (the sum over every look stays ``alpha``). The interval
decides when it clears 0 (a saving, or a change that is slower) and is narrow beside the saving
(:data:`PRECISION`), or lies within
:data:`NEGLIGIBLE` of side A's time either way (no change worth a promise); else the child stops at
its time cap and the figure says it is undecided.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PairedTiming:
    """Alternated timings of two sides (us per iteration) and what their pairs say."""

    a_us: tuple[float, ...]
    b_us: tuple[float, ...]
    confidence: float = 0.95

    @property
    def pairs(self) -> int:
        return min(len(self.a_us), len(self.b_us))

    @property
    def a_median_us(self) -> float:
        return statistics.median(self.a_us)

    @property
    def b_median_us(self) -> float:
        return statistics.median(self.b_us)

    @property
    def differences(self) -> tuple[float, ...]:
        return tuple(a - b for a, b in zip(self.a_us, self.b_us, strict=False))

    @property
    def saving_us(self) -> float:
        """Median over pairs of A - B: what the change saves per iteration (negative: slower)."""
        return statistics.median(self.differences)

    @property
    def interval_us(self) -> tuple[float, float]:
        """The interval of :attr:`saving_us` at :attr:`confidence` (the whole range for few pairs)."""
        return median_interval(self.differences, self.confidence)


GROWTH = 1.5
"""After a look that does not decide, the next comes when the pairs have grown by this factor."""
NEGLIGIBLE = 0.02
"""An interval within this share of side A's time on both sides of 0 decides "no change"."""
ALPHA = 0.05
PRECISION = 0.5
"""A look decides a saving (or a slowdown) only when its interval's half-width is at most this share
of the saving: stopping at the first look whose interval clears 0 keeps the runs whose pairs happen
to lie far from 0 (such promises measured 2-4x what a longer direct A/B of the same change did). At
the cap the interval decides as it stands (:func:`decision` with ``precise=False``)."""


def look_confidence(look: int, alpha: float = ALPHA) -> float:
    """The confidence look ``look`` (from 1) decides at: ``1 - alpha * 6 / (pi^2 look^2)``."""
    return 1.0 - alpha * 6.0 / (math.pi ** 2 * max(1, look) ** 2)


def decision(a_us: Sequence[float], b_us: Sequence[float], look: int, precise: bool = True) -> str:
    """``saving`` or ``slower`` (the look's interval clears 0 and, when ``precise``, its half-width is
    at most :data:`PRECISION` of the saving), ``negligible`` (it lies within :data:`NEGLIGIBLE` of side
    A's median), or "" (undecided: add pairs)."""
    t = PairedTiming(tuple(a_us), tuple(b_us), confidence=look_confidence(look))
    if t.pairs < 2:
        return ""
    lo, hi = t.interval_us
    if (lo > 0 or hi < 0) and (not precise or (hi - lo) / 2 <= PRECISION * abs(t.saving_us)):
        return "saving" if lo > 0 else "slower"
    band = NEGLIGIBLE * t.a_median_us
    return "negligible" if -band <= lo and hi <= band else ""


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Order-statistic interval of the median of ``values`` (sign test): (lowest, highest) when
    there are too few values for the confidence asked."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return (math.nan, math.nan)
    alpha = 1.0 - confidence
    # The largest k with P(Binomial(n, 1/2) < k) <= alpha/2: the interval is [x_(k), x_(n-k+1)].
    k, tail = 0, 0.0
    while k < n:
        p = math.comb(n, k) / 2 ** n
        if tail + p > alpha / 2:
            break
        tail += p
        k += 1
    if k == 0:
        return (xs[0], xs[-1])
    return (xs[k - 1], xs[n - k])
