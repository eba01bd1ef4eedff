"""Interval arithmetic on one host's timeline (ns), for the host time a fix removes.

Disjoint unions, covered lengths and the nesting of a thread's events, as sorted numpy arrays:
:mod:`hlo_doctor.lint.host_cost` reads a capture's spans with them.
"""

from __future__ import annotations

import numpy as np

from hlo_doctor.trace.cwire import nested_parents, under_flagged
from hlo_doctor.trace.python_frames import DriverThread


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the given ones."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    heads = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    return s[heads], reach[np.r_[heads[1:] - 1, len(s) - 1]]


def covered(a: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each [lo, hi): its length covered by the disjoint sorted intervals ``a``."""
    s, e = a
    if not len(s) or not len(lo):
        return np.zeros(len(lo))
    before = np.r_[0.0, np.cumsum(e - s)]

    def upto(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right") - 1
        kk = np.maximum(k, 0)
        return np.where(k >= 0, before[kk] + np.clip(t - s[kk], 0.0, e[kk] - s[kk]), 0.0)

    return np.maximum(upto(hi) - upto(lo), 0.0)


def in_steps(steps: tuple[np.ndarray, np.ndarray] | None, lo: np.ndarray) -> np.ndarray:
    """Intervals that start inside a step (all of them without steps)."""
    if steps is None:
        return np.ones(len(lo), bool)
    k = np.searchsorted(steps[0], lo, side="right") - 1
    return (k >= 0) & (lo < steps[1][np.maximum(k, 0)])


def parents(thread: DriverThread) -> np.ndarray:
    """Index of each event's enclosing event on the thread (-1 at the top): a compiled walk where
    it is built (``cwire.nested_parents``), which this loop judges."""
    walked = nested_parents(thread.start_ns, thread.end_ns)
    if walked is not None:
        return walked
    parent = np.full(len(thread), -1, np.int64)
    stack: list[int] = []
    ends = thread.end_ns
    for i, start in enumerate(thread.start_ns.tolist()):
        while stack and ends[stack[-1]] <= start:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def inside(parent: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """True for events with an ancestor for which ``flag`` holds (a compiled walk where it is built,
    ``cwire.under_flagged``, which this loop judges)."""
    walked = under_flagged(parent, flag)
    if walked is not None:
        return walked
    out = np.zeros(len(parent), bool)
    for i in range(len(parent)):
        p = parent[i]
        out[i] = p >= 0 and (flag[p] or out[p])
    return out
