"""Judging matched runs: the machine-speed factor, the noise between the captures, step and op times,
new ops the policy fails on, and the verdict.

Where both runs have per-step samples (step wall times; per-op times per step), a change is judged with
:func:`hlo_doctor.statistics.compare_samples`: a regression needs a significant test *and* an effect
beyond the policy's limit (per-op tests share one ``alpha``, Bonferroni). Two captures of one program
on a shared machine also run at different speeds, which no within-capture test sees: the candidate's
speed is estimated from the ops in common (time-weighted median ratio, ``normalize_speed``) and
divided out, and a timing regression must also exceed ``noise_z`` times the spread of those ops'
ratios (the noise between the captures). Without per-step samples the point estimates are compared
with the limits.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hlo_doctor.core.lazy import pd
from hlo_doctor.gate.match import Matched, OpStatsLike
from hlo_doctor.gate.policy import GatePolicy
from hlo_doctor.gate.result import OpDiff, Verdict, Violation
from hlo_doctor.statistics import Outcome, SampleComparison, compare_point_estimates, compare_samples

__all__ = ["MIN_OPS_FOR_NOISE", "MIN_OPS_FOR_SPEED", "Judging", "OpJudgements", "StepJudgement",
           "estimate_noise", "estimate_speed", "judge_matched", "judge_new", "judge_step", "judged_keys",
           "list_vanished", "time_pairs", "verdict_of"]

MIN_OPS_FOR_SPEED = 3
"""Fewest ops in common (above the floor) from which the machine-speed factor is estimated."""
MIN_OPS_FOR_NOISE = 5
"""Fewest ops in common (above the floor) from which the noise between two captures is estimated."""

Samples = dict[str, np.ndarray]


def is_ignored(key: str, policy: GatePolicy) -> bool:
    """Whether a glob of the policy's ``ignore`` matches this canonical key."""
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in policy.ignore)


def judged_keys(m: Matched, policy: GatePolicy) -> list[str]:
    """Keys in common, not ignored, above the floor in at least one run: the ops that are judged."""
    return [
        k for k in m.common_keys
        if not is_ignored(k, policy)
        and max(m.base_agg.at[k, "time_per_step_us"], m.cand_agg.at[k, "time_per_step_us"]) >= policy.op_floor_us
    ]


def time_pairs(m: Matched, keys: Sequence[str], b_samples: Samples, c_samples: Samples) -> list[tuple[float, float]]:
    """(baseline, candidate) typical time of each key: the per-step median where both runs have
    samples, the mean time per step otherwise; pairs with a zero side are left out."""

    def typical(key: str, samples: Samples, agg: pd.DataFrame) -> float:
        if key in b_samples and key in c_samples:
            return float(np.median(samples[key]))
        return float(agg.at[key, "time_per_step_us"])

    pairs = [(typical(k, b_samples, m.base_agg), typical(k, c_samples, m.cand_agg)) for k in keys]
    return [(b, c) for b, c in pairs if b > 0 and c > 0]


def _weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The value at which the cumulative weight reaches half (the lower one on an exact tie)."""
    order = np.argsort(values)
    v = np.asarray(values, dtype=float)[order]
    cum = np.cumsum(np.asarray(weights, dtype=float)[order])
    return float(v[int(np.searchsorted(cum, cum[-1] / 2.0))])


def _few(n: int) -> str:
    """``no op`` / ``only 1 op`` / ``only 2 ops``: how many ops a note had to work with."""
    return "no op" if n == 0 else f"only {n} op" + ("s" if n > 1 else "")


def estimate_speed(pairs: list[tuple[float, float]], policy: GatePolicy) -> tuple[float, int, str | None]:
    """(speed factor, ops it came from, note): 1.0 and 0 ops when not normalized or too few ops."""
    if not policy.normalize_speed:
        return 1.0, 0, None
    if len(pairs) < MIN_OPS_FOR_SPEED:
        return 1.0, 0, (
            f"{_few(len(pairs))} in common above the {policy.op_floor_us:g} us/step floor (need "
            f"{MIN_OPS_FOR_SPEED}) to estimate the machine speed: times compared as captured"
        )
    # The time-weighted median op ratio: how much faster or slower the candidate's machine ran the same
    # ops. Weighted by time because contention slows the big, memory-bound ops more than the small ones
    # (by both runs' times, so that swapping the runs inverts the factor); a median, so that ops holding
    # less than half of the time that really regressed move it little.
    speed = _weighted_median([c / b for b, c in pairs], [b + c for b, c in pairs])
    return speed, len(pairs), (
        f"machine speed: the {len(pairs)} ops in common ran x{speed:.3f} their baseline time (time-weighted median "
        "ratio); step and op times are judged relative to that (normalize_speed)"
    )


def estimate_noise(pairs: list[tuple[float, float]], speed: float, policy: GatePolicy) -> tuple[float, str | None]:
    """(robust spread of the log time ratios around ``speed``, note); 0 when off or too few ops."""
    if policy.noise_z <= 0:
        return 0.0, None
    if len(pairs) < MIN_OPS_FOR_NOISE:
        return 0.0, (
            f"{_few(len(pairs))} in common above the {policy.op_floor_us:g} us/step floor (need "
            f"{MIN_OPS_FOR_NOISE}) to estimate the noise between the captures: timing judged on the per-step "
            "samples alone, which do not see it"
        )
    # Spread around the speed the judgement assumes (1 when not normalized): ops that disagree with it,
    # in either direction, are what one capture-to-capture difference looks like.
    logs = np.log([c / b for b, c in pairs])
    noise = float(1.4826 * np.median(np.abs(logs - math.log(speed))))
    return noise, (
        f"noise between the captures: the {len(pairs)} ops in common disagree by +-{math.expm1(noise):.0%} "
        f"(robust spread of their time ratios); a timing regression must exceed "
        f"+{math.expm1(policy.noise_z * noise):.0%} (noise_z = {policy.noise_z:g})"
    )


def undecided_slowdown(cmp: SampleComparison) -> bool:
    """An inconclusive comparison in which the candidate is slower: a regression not ruled out.

    An inconclusive comparison with the candidate no slower (identical captures, a faster op) is no
    suspected regression, so it never makes a strict gate inconclusive.
    """
    return cmp.outcome is Outcome.INCONCLUSIVE and cmp.ratio > 1.0


@dataclass(frozen=True, slots=True)
class Judging:
    """How comparisons are judged in one gate run: the policy, strictness, speed and capture noise."""

    policy: GatePolicy
    strict: bool
    speed: float
    capture_noise: float

    def demote(self, cmp: SampleComparison) -> SampleComparison:
        """A regression (or improvement) the per-step test found, demoted to inconclusive when the
        captures disagree more than it."""
        if cmp.outcome not in (Outcome.REGRESSED, Outcome.IMPROVED) or self.capture_noise <= 0:
            return cmp
        limit = self.policy.noise_z * self.capture_noise
        if abs(math.log(cmp.ratio)) > limit:
            return cmp
        return replace(cmp, outcome=Outcome.INCONCLUSIVE, reason=(
            f"{cmp.reason}; but within the noise between the two captures (+{math.expm1(limit):.0%} needed)"
        ))

    def label(self, cmp: SampleComparison) -> str:
        """The judgement a report shows for a comparison."""
        if cmp.outcome is Outcome.INCONCLUSIVE:
            if not undecided_slowdown(cmp):
                return "not slower, within noise"
            return "inconclusive" if self.strict else "within noise"
        return str(cmp.outcome)


@dataclass(frozen=True, slots=True)
class StepJudgement:
    """The step-time comparison and what it adds to the result."""

    comparison: SampleComparison | None
    judgement: str
    violation: Violation | None
    within_noise: bool
    note: str | None


def judge_step(baseline: OpStatsLike, candidate: OpStatsLike, m: Matched, j: Judging) -> StepJudgement:
    """Step wall times: per-step samples where both runs have them, else the mean step times."""
    speed, policy = j.speed, j.policy
    b_steps = np.asarray(baseline.step_times_us or (), dtype=float) * speed
    c_steps = np.asarray(candidate.step_times_us or (), dtype=float)
    effect = policy.max_step_regression_pct / 100.0
    note = None
    step: SampleComparison | None
    if b_steps.size and c_steps.size:
        step = compare_samples(b_steps, c_steps, min_effect=effect, alpha=policy.alpha, min_samples=policy.min_samples)
    elif m.base.step_time_us > 0 and m.cand.step_time_us > 0:
        step = compare_point_estimates(m.base.step_time_us * speed, m.cand.step_time_us, min_effect=effect)
        note = "no per-step wall times in at least one run: step time judged on the mean alone"
    else:
        return StepJudgement(None, "not judged", None, False, "no step time in at least one run: step time not judged")
    step = j.demote(step)
    violation = None
    if step.outcome is Outcome.REGRESSED:
        adjusted = f", against the baseline x{speed:.3f} machine speed" if speed != 1.0 else ""
        violation = Violation(
            "step-time", "step",
            f"step time {step.baseline_median / speed:,.0f} -> {step.candidate_median:,.0f} us (median{adjusted}): "
            f"{step.reason}",
            step.candidate_median,
        )
    within = violation is None and undecided_slowdown(step)
    return StepJudgement(step, j.label(step), violation, within, note)


def _diff(key: str, row: pd.Series, status: str, b_us: float | None, c_us: float | None,
          judgement: str, comparison: SampleComparison | None = None) -> OpDiff:
    return OpDiff(
        key=key, module=str(row["module"]), opcode=str(row["opcode"]), category=str(row["category"]),
        shape=str(row["shape"]), ops=str(row["ops"]), status=status, baseline_us=b_us, candidate_us=c_us,
        bytes_written=int(row.get("bytes_written", 0) or 0), source=str(row.get("source", "") or ""),
        judgement=judgement, comparison=comparison,
    )


def _describe(row: pd.Series) -> str:
    ops = str(row.get("ops", "") or "")
    name = ops.split(", ")[0] if ops else str(row["opcode"])
    return f"{name} {row['shape']} in {row['module']}"


@dataclass(frozen=True, slots=True)
class OpJudgements:
    """The diffs of one group of keys, the violations among them and the keys within noise."""

    diffs: tuple[OpDiff, ...]
    violations: tuple[Violation, ...]
    within_noise: tuple[str, ...] = ()

    @property
    def failing(self) -> set[str]:
        """Keys with a violation."""
        return {v.key for v in self.violations}


def judge_matched(m: Matched, judged: Sequence[str], b_samples: Samples, c_samples: Samples,
                  j: Judging) -> OpJudgements:
    """Every key in common: ignored, below the floor, or compared (per-op tests share ``alpha``)."""
    policy, speed = j.policy, j.speed
    op_alpha = policy.alpha / max(1, len(judged))
    op_effect = policy.max_op_regression_pct / 100.0
    judged_set = set(judged)
    diffs: list[OpDiff] = []
    violations: list[Violation] = []
    within: list[str] = []
    for key in m.common_keys:
        row = m.cand_agg.loc[key]
        b_us, c_us = float(m.base_agg.at[key, "time_per_step_us"]), float(row["time_per_step_us"])
        if is_ignored(key, policy):
            diffs.append(_diff(key, row, "matched", b_us, c_us, "ignored"))
            continue
        if key not in judged_set:
            diffs.append(_diff(key, row, "matched", b_us, c_us, "below floor"))
            continue
        if key in b_samples and key in c_samples:
            cmp = compare_samples(b_samples[key] * speed, c_samples[key], min_effect=op_effect, alpha=op_alpha,
                                  min_samples=policy.min_samples)
        else:
            cmp = compare_point_estimates(b_us * speed, c_us, min_effect=op_effect)
        cmp = j.demote(cmp)
        diffs.append(_diff(key, row, "matched", b_us, c_us, j.label(cmp), cmp))
        if cmp.outcome is Outcome.REGRESSED:
            violations.append(Violation(
                "op-time", key, f"{_describe(row)}: {b_us:,.1f} -> {c_us:,.1f} us/step (mean): {cmp.reason}", c_us,
            ))
        elif undecided_slowdown(cmp):
            within.append(key)
    return OpJudgements(tuple(diffs), tuple(violations), tuple(within))


def _is_aliasing_copy(row: pd.Series) -> bool:
    if str(row["opcode"]) != "copy":
        return False
    operands = [s.strip() for s in str(row.get("operand_shapes", "") or "").split(";") if s.strip()]
    # Without operand shapes we cannot tell a layout-changing copy from an aliasing one: assume
    # aliasing, the costly kind this gate exists to catch.
    return not operands or operands[0] == str(row["shape"])


def _convert_only_modules(agg: pd.DataFrame) -> set[str]:
    """Modules all of whose ops are converts: a dispatch that does nothing but widen or narrow."""
    is_convert = agg["category"].astype(str) == "convert"
    return {str(m) for m, flags in is_convert.groupby(agg["module"]) if bool(flags.all())}


def _fails_when_new(row: pd.Series, policy: GatePolicy, convert_only: set[str]) -> str:
    """The ``fail_on_new`` entry this new op matches, or ''."""
    if int(row.get("bytes_written", 0) or 0) < policy.new_op_min_bytes:
        return ""
    for kind in policy.fail_on_new:
        if kind == "aliasing-copy":
            if _is_aliasing_copy(row):
                return kind
        elif kind == "standalone-convert":
            if str(row["category"]) == "convert" and str(row["module"]) in convert_only:
                return kind
        elif kind in (str(row["opcode"]), str(row["category"])):
            return kind
    return ""


def judge_new(m: Matched, policy: GatePolicy) -> OpJudgements:
    """Ops only in the candidate: the waste that came back fails when the policy names it."""
    convert_only = _convert_only_modules(m.cand_agg)
    diffs: list[OpDiff] = []
    violations: list[Violation] = []
    for key in m.cand_agg.index.difference(m.base_agg.index, sort=False):
        row = m.cand_agg.loc[key]
        c_us = float(row["time_per_step_us"])
        if is_ignored(key, policy):
            diffs.append(_diff(key, row, "new", None, c_us, "ignored"))
            continue
        kind = _fails_when_new(row, policy, convert_only)
        if not kind:
            diffs.append(_diff(key, row, "new", None, c_us, "new"))
            continue
        pct = f", {c_us / m.cand.step_time_us:.1%} of the step" if m.cand.step_time_us > 0 else ""
        what = {"aliasing-copy": "aliasing copy", "standalone-convert": "standalone convert"}.get(kind, f"'{kind}' op")
        violations.append(Violation(
            "new-op", key,
            f"new {what} {_describe(row)}: {c_us:,.1f} us/step{pct}, {int(row['bytes_written']):,} bytes written",
            c_us,
        ))
        diffs.append(_diff(key, row, "new", None, c_us, "new: fails the gate"))
    return OpJudgements(tuple(diffs), tuple(violations))


def list_vanished(m: Matched, policy: GatePolicy) -> tuple[OpDiff, ...]:
    """Ops only in the baseline (reported, never judged)."""
    out = []
    for key in m.base_agg.index.difference(m.cand_agg.index, sort=False):
        row = m.base_agg.loc[key]
        judgement = "ignored" if is_ignored(key, policy) else "vanished"
        out.append(_diff(key, row, "vanished", float(row["time_per_step_us"]), None, judgement))
    return tuple(out)


def verdict_of(violations: Sequence[Violation], within_noise: Sequence[str], strict: bool) -> Verdict:
    """Regression on any violation; inconclusive under strict with something within noise; else pass."""
    if violations:
        return Verdict.REGRESSION
    if strict and within_noise:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS
