"""One thread's events of a trace JSON, as columns (:class:`EventLine`), filled by :mod:`.json_events`."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

import numpy as np

from hlo_doctor.trace.json_decode import NONE

__all__ = ["NONE", "EventLine"]


@dataclass(slots=True)
class EventLine:
    """One thread's events as columns (times in ns; NaN / ``NONE`` where an arg is absent).

    Stored interleaved: :attr:`floats` holds (ts, dur, device offset, device duration) per event,
    :attr:`ints` (name code, args code, run id, step, group). The reader's hot loop extends the
    lists :attr:`pending_floats` / :attr:`pending_ints` (one ``list.extend`` per event and kind, about
    a third of an array's per-item extend) and :meth:`flush` moves them into the arrays once a batch.
    """

    floats: array = field(default_factory=lambda: array("d"))
    ints: array = field(default_factory=lambda: array("q"))
    pending_floats: list[float] = field(default_factory=list)
    pending_ints: list[int] = field(default_factory=list)

    def flush(self) -> None:
        """Move the pending values into the arrays (after each batch: memory stays bounded)."""
        if self.pending_floats:
            start = len(self.floats)
            self.floats.fromlist(self.pending_floats)
            with np.errstate(over="ignore"):  # ts and dur come in µs: to ns a batch at once, as ``x * 1e3``
                np.frombuffer(self.floats, np.float64)[start:].reshape(-1, 4)[:, :2] *= 1e3
        self.ints.fromlist(self.pending_ints)
        self.pending_floats.clear()
        self.pending_ints.clear()

    def _floats(self) -> np.ndarray:
        return np.frombuffer(self.floats, np.float64).reshape(-1, 4)

    def _ints(self) -> np.ndarray:
        return np.frombuffer(self.ints, np.int64).reshape(-1, 5)

    def __len__(self) -> int:
        return len(self.ints) // 5

    @property
    def names(self) -> np.ndarray:
        """Name codes (:attr:`EventFile.names`)."""
        return self._ints()[:, 0]

    @property
    def infos(self) -> np.ndarray:
        """Args codes (:attr:`EventFile.infos`; 0: no args kept)."""
        return self._ints()[:, 1]

    @property
    def run(self) -> np.ndarray:
        """``run_id`` (-1 when absent)."""
        return self._ints()[:, 2]

    @property
    def ts(self) -> np.ndarray:
        """``ts`` in ns (host clock)."""
        return self._floats()[:, 0]

    @property
    def dur(self) -> np.ndarray:
        """``dur`` in ns."""
        return self._floats()[:, 1]

    def column(self, name: str) -> np.ndarray:
        """``dev_off``, ``dev_dur`` (NaN when absent or not finite), ``step`` or ``group``
        (:data:`NONE`), one per event."""
        if name.startswith("dev"):
            values = self._floats()[:, 2 if name == "dev_off" else 3]
            return np.where(np.isfinite(values), values, math.nan)
        return self._ints()[:, 3 if name == "step" else 4]

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and durations (ns), on the device clock where the args give it.

        ``device_offset_ps`` counts from the line's start on the device clock, which the file does
        not give: the line is placed at the median of ``ts - device_offset`` over its events (one
        constant per line, so spacing and nesting are the device's own).
        """
        ts, dur = self.ts, self.dur
        off, ddur = self.column("dev_off"), self.column("dev_dur")
        has_off = ~np.isnan(off)
        if has_off.any():
            ts = ts.copy()
            ts[has_off] = float(np.median(ts[has_off] - off[has_off] / 1e3)) + off[has_off] / 1e3
        has_dur = ~np.isnan(ddur)
        return ts, (np.where(has_dur, ddur / 1e3, dur) if has_dur.any() else dur)
