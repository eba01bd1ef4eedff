"""The CI gate on a trace diff: match two op-stats tables on stable keys, judge them under a policy.

``gate(baseline, candidate, policy)`` returns a :class:`GateResult`: every op of either run with its
status (``matched``, ``new``, ``vanished``) and judgement, the step-time comparison, the policy
violations and the verdict (``pass``, ``regression``, ``inconclusive``) with its exit code. Nothing here
prints; :mod:`hlo_doctor.render.gate` turns a result into the artifacts a CI job keeps.

- :mod:`~hlo_doctor.gate.policy`: what counts as a regression (TOML, pyproject.toml, flags).
- :mod:`~hlo_doctor.gate.match`: one row per canonical key, and whether two runs compare at all.
- :mod:`~hlo_doctor.gate.judge`: machine speed, noise between the captures, step/op/new-op judgements.
- :mod:`~hlo_doctor.gate.result`: the verdict and what it is made of.

A slowdown that is neither shown nor ruled out is "within noise": it passes, except under ``strict``,
where it makes the verdict ``inconclusive`` (exit 1). docs/ci.md has the measured false-alarm and
detection rates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlo_doctor.gate.judge import (
    Judging,
    estimate_noise,
    estimate_speed,
    judge_matched,
    judge_new,
    judge_step,
    judged_keys,
    list_vanished,
    time_pairs,
    verdict_of,
)
from hlo_doctor.gate.match import OpStatsLike, RunSummary, match_runs, per_op_samples
from hlo_doctor.gate.memory import PeakDiff, judge_memory
from hlo_doctor.gate.policy import GatePolicy, PolicyError, find_policy_file, load_policy, resolve_policy
from hlo_doctor.gate.result import JSON_SCHEMA, GateResult, OpDiff, Verdict, Violation

if TYPE_CHECKING:
    import numpy as np

    from hlo_doctor.memory import MemoryReport

__all__ = [
    "JSON_SCHEMA",
    "GatePolicy",
    "GateResult",
    "OpDiff",
    "OpStatsLike",
    "PeakDiff",
    "PolicyError",
    "RunSummary",
    "Verdict",
    "Violation",
    "find_policy_file",
    "gate",
    "load_policy",
    "resolve_policy",
]

_RULE_ORDER = {"new-op": 0, "op-time": 1, "step-time": 2, "peak-memory": 3}


def gate(
    baseline: OpStatsLike,
    candidate: OpStatsLike,
    policy: GatePolicy | None = None,
    *,
    strict: bool = False,
    baseline_label: str = "baseline",
    candidate_label: str = "candidate",
    baseline_memory: MemoryReport | None = None,
    candidate_memory: MemoryReport | None = None,
    samples: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None,
) -> GateResult:
    """Compare ``candidate`` with ``baseline`` under ``policy``.

    ``baseline_memory``/``candidate_memory`` (:func:`hlo_doctor.memory.read_memory`) add the
    programs' peaks: one that grows beyond ``policy.max_peak_growth_pct`` fails (``peak-memory``).
    ``samples``: each side's :func:`~hlo_doctor.gate.match.per_op_samples`, taken as each was read
    (the command drops a side's per-step rows once they are taken: they are not held while the other
    side is read); by default taken here from the sides' ``per_step``.

    Raises:
        InputError: the runs are not comparable: different backends or device kinds, no HLO module in
            common, or less than ``policy.min_matched_fraction`` of the baseline's op time matched.
    """
    policy = policy or GatePolicy()
    m = match_runs(baseline, candidate, policy, baseline_label, candidate_label)
    b_samples, c_samples = samples if samples is not None else (per_op_samples(baseline), per_op_samples(candidate))
    judged = judged_keys(m, policy)
    pairs = time_pairs(m, judged, b_samples, c_samples)
    speed, speed_ops, speed_note = estimate_speed(pairs, policy)
    noise, noise_note = estimate_noise(pairs, speed, policy)
    judging = Judging(policy, strict, speed, noise)
    step = judge_step(baseline, candidate, m, judging)
    matched = judge_matched(m, judged, b_samples, c_samples, judging)
    new = judge_new(m, policy)

    samples_note = (None if b_samples and c_samples else
                    "no per-op per-step samples in at least one run: op times judged on their means alone")
    peaks: tuple[PeakDiff, ...] = ()
    peak_violations: tuple[Violation, ...] = ()
    peak_note: str | None = None
    if baseline_memory is not None or candidate_memory is not None:
        peaks, peak_violations, peak_note = judge_memory(baseline_memory, candidate_memory, policy)
    notes = tuple(n for n in (samples_note, speed_note, noise_note, step.note, peak_note) if n)
    failing = matched.failing | new.failing
    diffs = sorted((*matched.diffs, *new.diffs, *list_vanished(m, policy)),
                   key=lambda d: (d.key not in failing, -abs(d.delta_us), d.key))
    # New ops that fail first, in time order, then op times, then the step.
    violations = sorted((*new.violations, *matched.violations, *((step.violation,) if step.violation else ()),
                         *peak_violations),
                        key=lambda v: (_RULE_ORDER[v.rule], -(v.time_per_step_us or 0)))
    within_noise = (*(("step",) if step.within_noise else ()), *matched.within_noise)
    return GateResult(
        verdict=verdict_of(violations, within_noise, strict), strict=strict, policy=policy, baseline=m.base,
        candidate=m.cand, step=step.comparison, step_judgement=step.judgement, ops=tuple(diffs),
        violations=tuple(violations), within_noise=within_noise, matched_fraction=m.matched_fraction,
        speed_factor=speed, speed_ops=speed_ops, capture_noise=noise, notes=notes, memory=peaks,
    )
