"""numpy helpers for a trace's event columns: distinct values and codes by a table where their
range is small, counts a chunk at a time, a search of sorted needles. Imported by the reader's
columns (:mod:`.columns`) and its compiled side (:mod:`.cwire`) alike, and importing neither."""

from __future__ import annotations

import numpy as np


def unique_inverse(values: np.ndarray, *, scratch: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of integers: by a table over their range where it
    is small (metadata ids, codes: hundreds of values over millions of events), without sorting; the
    inverse is then int32. ``scratch``: ``values`` is the caller's to lose (shifted in place, not
    copied: one array an event fewer)."""
    if values.ndim == 1 and values.size and values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        limit = max(1 << 16, 4 * values.size)
        if hi - lo < limit:
            # Small non-negative values (ids, codes) index the table as they are: no shifted copy.
            base = 0 if 0 <= lo and hi < limit else lo
            if not base:
                shifted = values
            elif scratch:
                shifted = values
                shifted -= values.dtype.type(base)
            else:
                shifted = values - values.dtype.type(base)
            present = np.zeros(hi - base + 1, bool)
            present[shifted] = True
            uniq = np.flatnonzero(present)
            table = np.zeros(hi - base + 1, np.int32)  # (the inverse: 4 bytes an event, not 8)
            table[uniq] = np.arange(len(uniq))
            return (uniq + base).astype(values.dtype), table[shifted]
    return np.unique(values, return_inverse=True)


def searchsorted(haystack: np.ndarray, needles: np.ndarray, side: str = "left") -> np.ndarray:
    """``np.searchsorted(haystack, needles, side)``, by searching the haystack's values among the
    needles where these are sorted (millions of events against thousands of steps or module runs: a
    binary search per boundary and a count, not one per event)."""
    n = len(needles)
    if n < 1024 or len(haystack) * 8 > n or not bool((needles[1:] >= needles[:-1]).all()):
        return np.searchsorted(haystack, needles, side=side)  # type: ignore[call-overload,no-any-return]
    # Needle i's answer counts the haystack values below it ("left") or not above it ("right"):
    # value j counts from the first needle above it (or not below it, "right").
    first = np.searchsorted(needles, haystack, side="right" if side == "left" else "left")
    return np.cumsum(np.bincount(first, minlength=n + 1)[:n])


_COUNT_CHUNK = 1 << 18


def counts(values: np.ndarray, minlength: int = 0) -> np.ndarray:
    """``np.bincount(values, minlength=minlength)`` of non-negative integers a chunk at a time: numpy
    makes an int64 copy of narrower ones (26 MB for a device trace's 3.3 million events)."""
    if values.dtype == np.intp or len(values) <= _COUNT_CHUNK:
        return np.bincount(values, minlength=minlength)
    out = np.zeros(max(minlength, int(values.max()) + 1 if len(values) else 0), np.int64)
    for a in range(0, len(values), _COUNT_CHUNK):
        part = np.bincount(values[a:a + _COUNT_CHUNK])
        out[:len(part)] += part
    return out


def unique_values(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``; of integers by a table over their range where it is small."""
    if values.ndim == 1 and values.size and values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < max(1 << 16, 4 * values.size):
            present = np.zeros(hi - lo + 1, bool)
            present[values - values.dtype.type(lo)] = True
            return (np.flatnonzero(present) + lo).astype(values.dtype)
    # Sorted, each value once: np.unique without its other outputs imports numpy.ma (10-18 ms).
    ordered = np.sort(values.reshape(-1))
    if not ordered.size or (ordered.dtype.kind in "fc" and np.isnan(ordered[-1])):
        return np.unique(values) if ordered.size else ordered  # (NaNs sort last; np.unique keeps one)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
