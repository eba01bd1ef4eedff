"""Matching two runs: one row per canonical key, per-step samples, and whether they compare at all.

Ops are matched on the op-stats table's ``canonical_key`` (module name without program id | opcode |
shape, disambiguated by the fusion's content where those collide), which survives recompiles and
renumbering; rows that share a key within one run are summed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.lazy import pd
from hlo_doctor.core.model import RunInfo
from hlo_doctor.gate.policy import GatePolicy
from hlo_doctor.opstats.per_step import PerStepLater, key_step_sums

__all__ = ["Matched", "OpStatsLike", "RunSummary", "aggregate", "check_comparable", "match_runs",
           "per_op_samples", "summarize"]


class OpStatsLike(Protocol):
    """What the gate reads of :class:`hlo_doctor.opstats.OpStats`."""

    @property
    def table(self) -> pd.DataFrame: ...
    @property
    def step_time_us(self) -> float: ...
    @property
    def step_times_us(self) -> Sequence[float]: ...
    @property
    def num_steps(self) -> int: ...
    @property
    def per_step(self) -> pd.DataFrame: ...
    @property
    def backend(self) -> str: ...
    @property
    def device_kind(self) -> str: ...
    @property
    def run(self) -> RunInfo | None: ...


_REQUIRED_COLUMNS = ("module", "op", "opcode", "category", "shape", "time_per_step_us", "canonical_key")
_PROGRAM_ID_SUFFIX = re.compile(r"\(\d+\)$|\.\d+$")


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One side of the comparison, as the report names it."""

    label: str
    """The path given on the command line."""
    backend: str
    device_kind: str
    num_steps: int
    step_time_us: float
    modules: tuple[str, ...]
    """Module names without program ids."""
    op_time_us: float
    """Sum of all ops' time per step (ops overlap on XLA:CPU, so this can exceed the step time)."""
    capture: tuple[str, ...] = ()
    """The files read for this side (relative to the working folder); empty where no command said."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = asdict(self)
        d["modules"] = list(self.modules)
        d["capture"] = list(self.capture)
        return d


def _module_base(name: str) -> str:
    return _PROGRAM_ID_SUFFIX.sub("", name)


def _device_kind(stats: OpStatsLike) -> str:
    """The table's device kind, else the one ``run.json`` recorded."""
    return stats.device_kind or (stats.run.device_kind if stats.run is not None else "")


def aggregate(table: pd.DataFrame, label: str) -> pd.DataFrame:
    """One row per canonical key: times and counts summed, descriptive columns from the largest row."""
    missing = [c for c in _REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise InputError(
            f"{label}: op-stats table lacks column(s) {', '.join(missing)}",
            "re-export it with this version of hlo-doctor (hlo-doctor profile / stats)",
        )
    t = table.copy()
    for col, default in (("occurrences", 0), ("bytes_written", 0), ("operand_shapes", ""), ("source", "")):
        if col not in t.columns:
            t[col] = default
    t["time_per_step_us"] = pd.to_numeric(t["time_per_step_us"], errors="coerce").fillna(0.0).astype(float)
    t = t.sort_values("time_per_step_us", ascending=False, kind="stable")
    grouped = t.groupby("canonical_key", sort=False)
    first = grouped[["module", "opcode", "category", "shape", "operand_shapes", "source"]].first()
    agg = pd.DataFrame({
        "time_per_step_us": grouped["time_per_step_us"].sum(),
        "occurrences": grouped["occurrences"].sum(),
        "bytes_written": grouped["bytes_written"].max(),
        "ops": grouped["op"].agg(lambda s: ", ".join(dict.fromkeys(str(x) for x in s))),
    })
    out = first.join(agg)
    out["module"] = out["module"].astype(str).map(_module_base)
    return out


def per_op_samples(stats: OpStatsLike) -> dict[str, np.ndarray]:
    """Per-step time of each canonical key (0 in steps where it did not run); empty without samples."""
    later = getattr(stats, "per_step_data", None)
    if isinstance(later, PerStepLater):  # a table built from sums: its samples without the frame
        return later.samples_by_key()
    per_step = stats.per_step
    if len(per_step) == 0 or "canonical_key" not in per_step.columns:
        return {}
    # Codes, not a group-by over hundreds of thousands of strings (a row per op and step): the keys in
    # sorted order, each step's column, the sums by one bincount (a row without a key is in no group,
    # as a group-by drops it).
    key_codes, keys = pd.factorize(per_step["canonical_key"], sort=True)
    steps, step_codes = np.unique(per_step["step"].to_numpy(), return_inverse=True)
    sums = key_step_sums(key_codes, len(keys), step_codes, len(steps), per_step["time_us"].to_numpy(dtype=float))
    return {str(key): sums[k] for k, key in enumerate(keys)}


def _finite(value: Any) -> float:
    """A float for the report: missing, NaN or infinite values become 0 (the JSON verdict has no NaN)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) else 0.0


def summarize(stats: OpStatsLike, label: str, agg: pd.DataFrame) -> RunSummary:
    """One side of the comparison, from its table and its aggregate (:func:`aggregate`)."""
    return RunSummary(
        label=label,
        backend=stats.backend or "",
        device_kind=_device_kind(stats),
        num_steps=int(stats.num_steps or 0),
        step_time_us=_finite(stats.step_time_us),
        modules=tuple(sorted(set(agg["module"]))),
        op_time_us=float(agg["time_per_step_us"].sum()),
        capture=tuple(getattr(stats, "capture", ()) or ()),
    )


def check_comparable(base: RunSummary, cand: RunSummary, matched_fraction: float, policy: GatePolicy) -> None:
    """Refuse (exit 2) runs whose op times cannot be compared."""
    what = f"baseline {base.label} and candidate {cand.label}"
    if base.backend and cand.backend and base.backend.lower() != cand.backend.lower():
        raise InputError(
            f"{what} come from different backends ({base.backend} vs {cand.backend}): op times are not comparable",
            "gate captures of the same backend; keep one baseline per backend",
        )
    if base.device_kind and cand.device_kind and base.device_kind != cand.device_kind:
        raise InputError(
            f"{what} come from different devices ({base.device_kind} vs {cand.device_kind})",
            "gate captures of the same device kind; keep one baseline per device kind",
        )
    common = set(base.modules) & set(cand.modules)
    if not common:
        raise InputError(
            f"{what} have no HLO module in common (baseline: {', '.join(base.modules) or 'none'}; "
            f"candidate: {', '.join(cand.modules) or 'none'}): they are different programs",
            "gate two captures of the same program",
        )
    if matched_fraction < policy.min_matched_fraction:
        raise InputError(
            f"{what} share only {matched_fraction:.0%} of the baseline's op time "
            f"(the policy's min_matched_fraction is {policy.min_matched_fraction:.0%}): "
            "different programs or shapes",
            "gate captures of the same program and configuration, or refresh the baseline on purpose (docs/ci.md)",
        )


@dataclass(frozen=True, slots=True)
class Matched:
    """Both runs aggregated per canonical key, their summaries, and which keys they share."""

    base_agg: pd.DataFrame
    cand_agg: pd.DataFrame
    base: RunSummary
    cand: RunSummary
    common_keys: pd.Index
    matched_fraction: float
    """Share of the baseline's op time whose keys the candidate also has."""


def match_runs(
    baseline: OpStatsLike, candidate: OpStatsLike, policy: GatePolicy, baseline_label: str, candidate_label: str
) -> Matched:
    """Aggregate both runs per canonical key and check that they compare (:func:`check_comparable`)."""
    base_agg = aggregate(baseline.table, baseline_label)
    cand_agg = aggregate(candidate.table, candidate_label)
    base_sum = summarize(baseline, baseline_label, base_agg)
    cand_sum = summarize(candidate, candidate_label, cand_agg)
    common_keys = base_agg.index.intersection(cand_agg.index)
    base_total = float(base_agg["time_per_step_us"].sum())
    matched = float(base_agg.loc[common_keys, "time_per_step_us"].sum())
    matched_fraction = matched / base_total if base_total > 0 else (1.0 if len(common_keys) else 0.0)
    check_comparable(base_sum, cand_sum, matched_fraction, policy)
    return Matched(base_agg, cand_agg, base_sum, cand_sum, common_keys, matched_fraction)
