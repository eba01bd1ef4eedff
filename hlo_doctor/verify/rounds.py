"""The order of the measured rounds, the same for every kind of target: AB, BA, AB, ...

Alternating the order per pair keeps either variant from always running right after the other one
(a cache or a clock warmed by the previous round then favours both alike). :func:`run_rounds` runs
them, and with a time budget adds pairs until the verdict decides or the budget is spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

from hlo_doctor.verify.results import Stopping

LABELS = ("baseline", "treatment")


def pair_order(pair: int) -> tuple[str, str]:
    """The labels of pair ``pair`` (from 0) in the order they run: AB for even pairs, BA for odd."""
    return LABELS if pair % 2 == 0 else (LABELS[1], LABELS[0])


def interleaved(pairs: int) -> Iterator[str]:
    """``baseline``/``treatment`` labels of ``pairs`` pairs of rounds, in the order they run."""
    for pair in range(pairs):
        yield from pair_order(pair)


GROWTH = 1.5
"""With a budget, each look after the first comes when the pairs have grown by this factor (6, 9, 14,
21, 32, ... pairs): few looks, so that the significance level spent per look stays usable."""


def run_rounds(pairs: int, measure: Callable[[str, int], None], *, budget_s: float | None = None,
               decided: Callable[[int], bool] | None = None,
               clock: Callable[[], float] = time.perf_counter) -> Stopping:
    """Run ``pairs`` interleaved pairs of rounds (``measure(label, order)`` each); then, with a budget,
    ask ``decided(look)`` and add pairs until it says yes or no pair fits in the budget any more.

    After a look that does not decide, pairs are added up to ``GROWTH`` times the count so far (at
    least one), as many of them as fit: the seconds spent so far plus the longest pair so far per
    added pair stay within ``budget_s`` (the budget counts the measured rounds, the first ``pairs``
    included). ``look`` counts from 1 (after the first ``pairs``), so the caller can lower its alpha
    per look.
    """
    start = clock()
    longest = 0.0
    order = 0

    def one_pair(index: int) -> None:
        nonlocal longest, order
        began = clock()
        for label in pair_order(index):
            measure(label, order)
            order += 1
        longest = max(longest, clock() - began)

    for pair in range(pairs):
        one_pair(pair)
    if budget_s is None or decided is None:
        return Stopping(pairs, pairs, budget_s, clock() - start, False)
    look, run = 1, pairs
    while True:
        if decided(look):
            return Stopping(run, pairs, budget_s, clock() - start, True, look)
        fit = int((budget_s - (clock() - start)) // longest) if longest > 0 else 0
        add = min(max(1, math.ceil(run * GROWTH) - run), fit)
        if add < 1:
            return Stopping(run, pairs, budget_s, clock() - start, False, look)
        for _ in range(add):
            one_pair(run)
            run += 1
        look += 1
