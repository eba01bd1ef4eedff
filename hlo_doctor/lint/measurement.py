"""A figure measured on this machine: its raw samples, its median and the interval around it.

What a what-if run times (:mod:`.whatif`), and whatever else times a change here, is one
:class:`Measurement`: the raw per-run times of each side (``wide``/``narrow``...), the figure they
give (the median of the runs' paired ratios, ``x1.61``), a distribution-free interval of that median
(order statistics: the interval's coverage follows from the number of runs alone, no assumption on
the timing's distribution) and what it was measured on (machine, jax, jaxlib, when). The same
samples always give the same figure and interval, so a stored measurement reads back as it was.

A measurement *decides* (severity, a promise's sign) only when its interval is worth it: at least
:data:`DECISIVE_RUNS` paired runs, whose median interval then covers at least 90%. Fewer runs (a
what-if cut short by its time limit) still price a finding, and say so, but never set its severity.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from hlo_doctor.core.machine import machine_here
from hlo_doctor.core.pyproject import env_seconds

BUDGET_ENV = "HLO_DOCTOR_MEASURE_SECONDS"
"""The most seconds ``diagnose`` spends timing one fix's change (default 10)."""
DEFAULT_BUDGET_S = 10.0


def measure_budget() -> float:
    """The budget :data:`BUDGET_ENV` sets, else :data:`DEFAULT_BUDGET_S`: the most seconds of pairs or
    rounds a replay, a program A/B or an engine A/B of one fix may take before it stops undecided
    (each still times its first look: a replay's first pairs, an A/B's first rounds). A shorter
    budget decides fewer changes; what it measured says so (an A/B's record is keyed by its budget; a
    stored replay is reused whatever cap made it, and says its cap).

    Raises:
        InputError: a value that is not a number of seconds above 0.
    """
    return env_seconds(BUDGET_ENV, DEFAULT_BUDGET_S, f"the default is {DEFAULT_BUDGET_S:g} s")


LEVEL = 0.95
"""The interval's target coverage; with few runs the widest one (min..max) and its own coverage."""
DECISIVE_RUNS = 5
MAX_SIDES = 256
"""The most sides one record holds (a replay keeps its compiled op counts as sides of one value)."""
"""Paired runs a measurement needs before it may decide a severity (min..max of 5 covers 94%)."""


@dataclass(frozen=True, slots=True)
class Identity:
    """What a measurement stands for: the capture it prices and where it was made."""

    capture: str
    """A digest of the capture's files (``sha256:...``), or "" where there is no capture."""
    machine: str
    jax: str
    jaxlib: str


@dataclass(frozen=True, slots=True)
class Measurement:
    """One figure measured here: raw samples per side (us), the figure, its interval, where and when."""

    kind: str
    """What measured it (``what-if/narrow-read``)."""
    key: str
    """What was measured, in words (``argmax over [64,256000] axis 1: f32 vs bf16``)."""
    samples: tuple[tuple[str, tuple[float, ...]], ...]
    """(side, per-run times in us, in run order) for each side."""
    median: float
    low: float
    high: float
    level: float
    """The coverage of [low, high] as an interval of the median."""
    reps: int
    """Runs of each side."""
    when: str
    """UTC, ISO 8601 to the second (``2026-12-01T22:50:03Z``)."""
    identity: Identity
    unit: str = "ratio"
    """``ratio`` (the second side over the first) or ``us``."""
    budget_s: float | None = None
    """Where runs were added until the interval decided: the time cap they were added under."""
    stopped: str = ""
    """With a cap: why no more runs were added (``saving``, ``slower``, ``negligible``: the interval
    decided; ``cap``: the cap was reached undecided)."""

    @property
    def decisive(self) -> bool:
        """Whether the interval may decide a severity or a promise's sign (enough runs)."""
        return self.reps >= DECISIVE_RUNS and self.level >= 0.9

    def side(self, name: str) -> tuple[float, ...]:
        """The samples of one side (empty when there is none)."""
        return next((v for k, v in self.samples if k == name), ())

    def figure(self) -> str:
        """``x1.61 [1.55, 1.68]`` (a ratio) or ``12.3 us [11.9, 13.0]``."""
        if self.unit == "ratio":
            return f"x{self.median:.2f} [{self.low:.2f}, {self.high:.2f}]"
        return f"{self.median:,.1f} us [{self.low:,.1f}, {self.high:,.1f}]"

    def label(self) -> str:
        """``measured here 2026-12-01, 7 runs each, x1.61 [1.55, 1.68]``: what every view prints beside it."""
        runs = f"{self.reps} run{'s' if self.reps != 1 else ''}{' each' if len(self.samples) > 1 else ''}"
        return f"measured here {self.when[:10]}, {runs}, {self.figure()}"

    def to_dict(self) -> dict[str, Any]:
        """The stored record (schema of :mod:`.store`)."""
        return {"kind": self.kind, "key": self.key, "capture": self.identity.capture,
                "machine": self.identity.machine, "jax": self.identity.jax, "jaxlib": self.identity.jaxlib,
                "samples": {k: list(v) for k, v in self.samples}, "unit": self.unit, "median": self.median,
                "spread": {"low": self.low, "high": self.high, "level": self.level, "method": "order-statistic"},
                "reps": self.reps, "when": self.when,
                **({"budget_s": self.budget_s, "stopped": self.stopped} if self.budget_s is not None else {})}


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(low, high, coverage): the order-statistic interval of the median of ``values``.

    [x(k), x(n+1-k)] covers the median with probability 1 - 2 P(Binomial(n, 1/2) < k), whatever the
    distribution; k is the largest that still covers ``level``, else 1 (min..max, with its coverage).
    """
    xs = sorted(values)
    n = len(xs)
    if not n:
        return math.nan, math.nan, 0.0

    # Exact integers (2^n overflows a float past ~1000 runs): tail = sum of C(n, i) for i < k.
    total, tail, k = 2 ** n, 1, 1

    def coverage(below: int) -> float:
        return 1.0 - 2 * below / total

    while k + 1 <= (n + 1) // 2 and coverage(tail + math.comb(n, k)) >= level:
        tail += math.comb(n, k)
        k += 1
    return xs[k - 1], xs[n - k], max(0.0, coverage(tail))


def paired_ratio(kind: str, key: str, first: tuple[str, Sequence[float]], second: tuple[str, Sequence[float]],
                 identity: Identity, when: str | None = None) -> Measurement:
    """A measurement of ``second / first`` from runs taken in pairs (run i of each side together): the
    median of the pairs' ratios and its interval. Pairing keeps a shared machine's drift out of it."""
    a, b = [float(x) for x in first[1]], [float(x) for x in second[1]]
    ratios = [y / x for x, y in zip(a, b, strict=False) if x > 0]
    if not ratios:
        raise ValueError("no paired runs with a positive time")
    low, high, level = median_interval(ratios)
    return Measurement(kind=kind, key=key, samples=((first[0], tuple(a)), (second[0], tuple(b))),
                       median=float(statistics.median(ratios)), low=low, high=high, level=level,
                       reps=len(ratios), when=when or now_utc(), identity=identity)


def now_utc() -> str:
    """This moment, UTC, to the second: ``2026-12-01T22:50:03Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def measured_extra(m: Measurement, net_us: tuple[float, float],
                   model_recoverable_us: float | None) -> tuple[tuple[str, object], ...]:
    """What a finding priced by ``m`` carries in ``extra``, for severity (:mod:`.severity`), the fix's
    promise (:mod:`.promise`) and every view: the label, when, how many runs, the interval, the range of
    what the finding's fix recovers less what it costs per step (``measured_net_us``) and the capture's
    own estimate (``model_recoverable_us``: None where the capture cannot price it)."""
    lo, hi = sorted(net_us)
    return (("measured", m.label()), ("measured_when", m.when), ("measured_reps", m.reps),
            ("measured_interval", (round(m.low, 4), round(m.high, 4))), ("measured_level", round(m.level, 3)),
            ("measured_decisive", m.decisive), ("measured_net_us", (round(lo, 1), round(hi, 1))),
            ("model_recoverable_us", model_recoverable_us))


def identity_here(capture: str) -> Identity:
    """The identity of a measurement made in this process for ``capture``."""
    jax, jaxlib = versions_here()
    return Identity(capture=capture, machine=machine_here(), jax=jax, jaxlib=jaxlib)


@lru_cache(maxsize=1)
def versions_here() -> tuple[str, str]:
    """(jax, jaxlib) installed for this process, from their package metadata (jax is not imported:
    a diagnosis that reuses a stored measurement never loads it); "" for a missing one."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("jax", "jaxlib"):
        try:
            found.append(version(name))
        except PackageNotFoundError:
            found.append("")
    return found[0], found[1]


def from_record(doc: Mapping[str, Any]) -> Measurement:
    """A stored record back as a :class:`Measurement`; ValueError naming what is wrong with it."""
    def text(name: str, limit: int = 400) -> str:
        v = doc.get(name)
        if not isinstance(v, str) or len(v) > limit:
            raise ValueError(f"'{name}' is not a string of at most {limit} characters")
        return v

    def number(v: object, name: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"'{name}' is not a finite number >= 0")
        return float(v)

    samples = doc.get("samples")
    if not isinstance(samples, Mapping) or not 1 <= len(samples) <= MAX_SIDES:
        raise ValueError(f"'samples' is not an object of 1 to {MAX_SIDES} sides")
    sides: list[tuple[str, tuple[float, ...]]] = []
    for side, values in samples.items():
        if not isinstance(side, str) or len(side) > 40 or not isinstance(values, list) or not 1 <= len(values) <= 10_000:
            raise ValueError("a side of 'samples' is not a list of 1 to 10000 times")
        sides.append((side, tuple(number(v, f"samples.{side}") for v in values)))
    spread = doc.get("spread")
    if not isinstance(spread, Mapping):
        raise ValueError("'spread' is not an object")
    median, low, high = number(doc.get("median"), "median"), number(spread.get("low"), "spread.low"), \
        number(spread.get("high"), "spread.high")
    level = number(spread.get("level"), "spread.level")
    if not low <= median <= high or level > 1.0:
        raise ValueError("'spread' does not hold the median (low <= median <= high, level <= 1)")
    reps = doc.get("reps")
    if isinstance(reps, bool) or not isinstance(reps, int) or not 1 <= reps <= 10_000:
        raise ValueError("'reps' is not a count of runs")
    when = text("when", 40)
    try:
        datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise ValueError("'when' is not a UTC time (YYYY-MM-DDTHH:MM:SSZ)") from None
    unit = text("unit", 10)
    if unit not in ("ratio", "us"):
        raise ValueError("'unit' is neither 'ratio' nor 'us'")
    budget = doc.get("budget_s")
    budget_s = None if budget is None else number(budget, "budget_s")
    stopped = text("stopped", 20) if budget_s is not None else ""
    return Measurement(kind=text("kind", 80), key=text("key"), samples=tuple(sides), median=median, low=low,
                       high=high, level=level, reps=reps, when=when, unit=unit, budget_s=budget_s, stopped=stopped,
                       identity=Identity(capture=text("capture", 100), machine=text("machine"), jax=text("jax", 40),
                                         jaxlib=text("jaxlib", 40)))
