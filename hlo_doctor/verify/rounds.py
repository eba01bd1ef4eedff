"""The order of the measured rounds, the same for every kind of target: AB, BA, AB, ...

Alternating the order per pair keeps either variant from always running right after the other one
(a cache or a clock warmed by the previous round then favours both alike).
"""

from __future__ import annotations

from collections.abc import Iterator

LABELS = ("baseline", "treatment")


def interleaved(pairs: int) -> Iterator[str]:
    """``baseline``/``treatment`` labels of ``pairs`` pairs of rounds, in the order they run."""
    for pair in range(pairs):
        yield from (LABELS if pair % 2 == 0 else LABELS[::-1])
