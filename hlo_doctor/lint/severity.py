"""Severity from cost: a finding's severity follows its share of the step.

A rule declares a severity; with op stats, that is replaced by what the finding costs, so that
``--fail-on high`` means real time. The share is the finding's recoverable time over the step time
(its op time when the rule gives no estimate). Bands, in % of the step:

========  ==========
HIGH      >= 2%
MEDIUM    >= 0.5%
LOW       >= 0.05%
INFO      below
========  ==========

The op's category breaks ties at a band's edge: pure data movement or conversion (categories
``copy``, ``convert``, ``data-movement``), which a fix removes entirely and whose cost grows with the
tensor, goes one band up when its share is within 75% of the next band's threshold. Findings
without times (HLO-only input, source rules) and findings the rule leaves unpriced (``extra``
``("estimate", "not priced")``) keep the rule's severity; internal errors stay errors.

The step the share divides by is itself a few traced steps, which vary (the first after a pause,
a host hiccup): a finding's band is judged against the middle of the traced steps (all of them
where there are under five, else all but the fastest and the slowest). Where its share over the
slowest of them and over the fastest fall in two bands, the finding takes the higher one and says
so (``severity_basis``): near an edge, two captures of one program then agree, rather than each
taking the side its mean step fell on.

Severity never rests on one noisy timing. A finding priced by a measurement made here (a what-if
run: ``extra`` ``measured_net_us``, the range of what its fix gives back per step, from the
measurement's interval) takes the band of that range only when the measurement is decisive (enough
runs: :data:`hlo_doctor.lint.measurement.DECISIVE_RUNS`) and both ends of the range fall in the
same band. Otherwise its severity is the model's, what the capture's own figures give
(``model_recoverable_us``; None: the capture cannot price it, so the rule's severity), the one it
has without the what-if, and its message says why (``severity_basis`` in ``extra``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hlo_doctor.core.model import Finding, Severity

SEVERITY_BANDS: tuple[tuple[Severity, float], ...] = (
    (Severity.HIGH, 2.0), (Severity.MEDIUM, 0.5), (Severity.LOW, 0.05),
)
"""(severity, lowest % of the step), highest first."""
PURE_WASTE_CATEGORIES = frozenset({"copy", "convert", "data-movement"})
TIE_MARGIN = 0.75
"""A pure-waste op at or above this fraction of the next threshold is promoted to it."""


def share_of_step(finding: Finding, step_time_us: float | None) -> float | None:
    """The finding's cost in % of the step: recoverable time, else op time; None when untimed."""
    if not step_time_us:
        return None
    if finding.recoverable_us is None and ("estimate", "not priced") in finding.extra:
        return None  # the rule says the trace cannot price it: its op time would overstate it
    cost = finding.recoverable_us if finding.recoverable_us is not None else finding.time_per_step_us
    return None if cost is None else 100.0 * cost / step_time_us


def severity_for(share: float, category: str = "") -> Severity:
    """The band of ``share`` (% of step), promoted one band for pure waste near the next edge."""
    band = Severity.INFO
    for severity, threshold in SEVERITY_BANDS:
        if share >= threshold:
            band = severity
            break
    if category in PURE_WASTE_CATEGORIES:
        for severity, threshold in reversed(SEVERITY_BANDS):
            if severity > band and share >= TIE_MARGIN * threshold:
                return severity
    return band


def middle_steps(step_times_us: Sequence[float]) -> tuple[float, float] | None:
    """The fastest and the slowest of the traced steps' middle (all but the fastest and the slowest
    from five steps on); None under three steps."""
    import numpy as np  # (here: the rule API loads no numpy until a capture's steps are judged)

    # A pod's steps are a device's each: millions, taken as one array, not sorted as Python floats.
    times = np.asarray(step_times_us, dtype=np.float64)
    times = times[times > 0]
    n = len(times)
    if n < 3:
        return None
    if n < 5:
        return float(times.min()), float(times.max())
    part = np.partition(times, (1, n - 2))
    return float(part[1]), float(part[n - 2])


def with_cost_severity(finding: Finding, step_time_us: float | None, category: str = "",
                       step_times_us: Sequence[float] = ()) -> Finding:
    """``finding`` with its severity set from its share of the step (unchanged when untimed); for a
    finding priced by a measurement, from its measured range or from the model (module docstring);
    judged against the traced steps' spread where ``step_times_us`` gives three or more."""
    if finding.severity == Severity.ERROR:
        return finding
    extra = dict(finding.extra)
    measured = extra.get("measured_net_us")
    if step_time_us and isinstance(measured, (list, tuple)) and len(measured) == 2:
        return _measured_severity(finding, step_time_us, category, (float(measured[0]), float(measured[1])),
                                  bool(extra.get("measured_decisive")), extra.get("model_recoverable_us"))
    share = share_of_step(finding, step_time_us)
    if share is None:
        return finding
    severity = severity_for(share, category)
    spread = middle_steps(step_times_us)
    if spread is not None and step_time_us:
        fast, slow = spread
        low, high = share * step_time_us / slow, share * step_time_us / fast
        low_band, high_band = severity_for(low, category), severity_for(high, category)
        if low_band != high_band:
            why = f"its share over the traced steps' middle, {low:.2f}-{high:.2f}% of the step, reaches the {high_band} band"
            return replace(finding, severity=high_band, message=f"{finding.message}; severity {high_band}: {why}",
                           extra=(*finding.extra, ("severity_basis", f"the steps' spread: {why}")))
        severity = low_band
    return finding if severity == finding.severity else replace(finding, severity=severity)


def _measured_severity(finding: Finding, step_time_us: float, category: str, net_us: tuple[float, float],
                       decisive: bool, model_us: object) -> Finding:
    """The band of the measured range when it is decisive and in one band, else the model's severity."""
    lo, hi = (100.0 * max(0.0, x) / step_time_us for x in sorted(net_us))
    low_band, high_band = severity_for(lo, category), severity_for(hi, category)
    if decisive and low_band == high_band:
        return replace(finding, severity=low_band, extra=(*finding.extra, ("severity_basis", "measured")))
    if isinstance(model_us, (int, float)) and not isinstance(model_us, bool):
        model = severity_for(100.0 * float(model_us) / step_time_us, category)
    else:
        model = finding.severity  # the capture cannot price it: the rule's own severity
    why = ("too few runs to decide" if not decisive else
           f"its range, {lo:.2f}-{hi:.2f}% of the step, spans the {low_band}/{high_band} edge")
    note = f"; severity {model} from the capture's own figures, not the measurement ({why})"
    return replace(finding, severity=model, message=finding.message + note,
                   extra=(*finding.extra, ("severity_basis", f"model: {why}")))
