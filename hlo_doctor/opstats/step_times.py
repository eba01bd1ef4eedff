"""A capture's step wall times as one float64 array that reads as a sequence of floats.

A pod's step times are one per device and step: 64 hosts of 4 chips and 5,537 steps are 1.4 million,
45 MiB as a tuple of Python floats and 11 MiB as an array (the gate holds two captures' at once).
:class:`StepTimes` keeps the array and gives what the tuple gave: its length, truth, items and
iteration as Python floats, equality with any sequence of the same floats, and ``np.asarray`` of it
without a copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

__all__ = ["StepTimes", "float_list"]

_CHUNK = 1 << 16


class StepTimes(Sequence[float]):
    """Step wall times (us), read-only (see the module's docstring)."""

    __slots__ = ("_a",)

    def __init__(self, values: Iterable[float] | np.ndarray = ()) -> None:
        if isinstance(values, StepTimes):
            a = values._a  # (read-only: shared)
        else:  # a copy of its own, so that the caller's array stays the caller's
            a = np.array(values if isinstance(values, (np.ndarray, list, tuple)) else list(values),
                         dtype=np.float64).reshape(-1)
            a.flags.writeable = False
        self._a: np.ndarray = a

    def __len__(self) -> int:
        return len(self._a)

    @overload
    def __getitem__(self, i: int) -> float: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[float, ...]: ...

    def __getitem__(self, i: int | slice) -> float | tuple[float, ...]:
        if isinstance(i, slice):
            return tuple(self._a[i].tolist())
        return float(self._a[i])

    def __iter__(self) -> Iterator[float]:
        for lo in range(0, len(self._a), _CHUNK):
            yield from self._a[lo:lo + _CHUNK].tolist()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if dtype is None or np.dtype(dtype) == self._a.dtype:
            return self._a.copy() if copy else self._a
        return self._a.astype(dtype)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepTimes):
            return bool(np.array_equal(self._a, other._a))
        if isinstance(other, (tuple, list)):
            return len(other) == len(self._a) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (equal to a tuple of its floats, which hashes otherwise)

    def __repr__(self) -> str:
        shown = self._a[:8].tolist()
        return f"StepTimes({shown}{' + ' + str(len(self._a) - 8) + ' more' if len(self._a) > 8 else ''})"

    def __reduce__(self) -> tuple[type[StepTimes], tuple[np.ndarray]]:
        return StepTimes, (self._a,)

    def tolist(self) -> list[float]:
        """The times as a list of Python floats."""
        out: list[float] = self._a.tolist()
        return out


def float_list(times: Sequence[float]) -> list[float]:
    """Step times (a :class:`StepTimes` or any sequence) as a list of Python floats."""
    return times.tolist() if isinstance(times, StepTimes) else [float(t) for t in times]
