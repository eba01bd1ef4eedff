"""The CI gate on a trace diff: match two op-stats tables on stable keys, judge them under a policy.

``gate(baseline, candidate, policy)`` returns a :class:`GateResult`: every op of either run with its
status (``matched``, ``new``, ``vanished``) and judgement, the step-time comparison, the policy
violations and the verdict (``pass``, ``regression``, ``inconclusive``) with its exit code. The
renderers at the end (:func:`render_json`, :func:`render_markdown`, :func:`render_junit`,
:func:`render_text`) turn a result into the artifacts a CI job keeps; nothing here prints.

Matching. Ops are matched on the op-stats table's ``canonical_key`` (module name without program id |
opcode | shape, disambiguated by the fusion's content where those collide), which survives recompiles
and renumbering; rows that share a key within one run are summed.

Noise. Where both runs have per-step samples (step wall times; per-op times per step), a change is
judged with :func:`hlo_doctor.statistics.compare_samples`: a regression needs a significant test *and*
an effect beyond the policy's limit (per-op tests share one ``alpha``, Bonferroni). Two captures of
one program on a shared machine also run at different speeds, which no within-capture test sees: the
candidate's speed is estimated from the ops in common (time-weighted median ratio, ``normalize_speed``)
and divided out, and a timing regression must also exceed ``noise_z`` times the spread of those
ops' ratios (the noise between the captures). A slowdown that is neither shown nor ruled out is
"within noise": it passes, except under ``strict``, where it makes the verdict ``inconclusive``
(exit 1); an undecided comparison in which the candidate is not slower never does. Without per-step
samples (a table export without them) the point estimates are compared with the limits.
docs/ci.md has the measured false-alarm and detection rates.

Policy. :class:`GatePolicy`, read from a TOML file (:func:`load_policy`), from
``[tool.hlo-doctor.gate]`` in the nearest ``pyproject.toml`` (:func:`find_policy_file`), and from
command-line overrides (:func:`resolve_policy`). An invalid policy raises :class:`PolicyError`
naming the file and the key (exit 2).
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import math
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from hlo_doctor.core.errors import ExitCode, HloDoctorError, InputError
from hlo_doctor.statistics import (
    Outcome,
    SampleComparison,
    compare_point_estimates,
    compare_samples,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "GatePolicy",
    "GateResult",
    "OpDiff",
    "OpStatsLike",
    "PolicyError",
    "RunSummary",
    "Verdict",
    "Violation",
    "find_policy_file",
    "gate",
    "load_policy",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_text",
    "resolve_policy",
]

JSON_SCHEMA = "hlo-doctor.gate/1"
MIN_OPS_FOR_SPEED = 3
"""Fewest ops in common (above the floor) from which the machine-speed factor is estimated."""
MIN_OPS_FOR_NOISE = 5
"""Fewest ops in common (above the floor) from which the noise between two captures is estimated."""
POLICY_TABLE = "tool.hlo-doctor.gate"


# --------------------------------------------------------------------------------------------------
# Policy


class PolicyError(HloDoctorError):
    """An invalid gate policy: names the file (or flag) and the key. Exit code 2."""


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """What counts as a regression. Every field is a key of the TOML policy (same name)."""

    max_step_regression_pct: float = 5.0
    """Largest allowed increase of the median step time, in percent."""
    max_op_regression_pct: float = 25.0
    """Largest allowed increase of one op's time per step, in percent (ops above the floor)."""
    op_floor_us: float = 20.0
    """Ops under this time per step in both runs are reported but not judged."""
    fail_on_new: tuple[str, ...] = ("aliasing-copy", "standalone-convert")
    """Ops whose appearance fails the gate: ``aliasing-copy`` (a copy whose operand has its exact shape
    and layout), ``standalone-convert`` (a convert that is a program of its own, like an eager
    ``x.astype(jnp.float32)``'s ``jit_convert_element_type``), or any opcode (``copy``, ``transpose``)
    or category (``convert``, which also catches converts inside a larger program)."""
    new_op_min_bytes: int = 1 << 20
    """A new op named in ``fail_on_new`` fails only when it writes at least this many bytes."""
    ignore: tuple[str, ...] = ()
    """Glob patterns on canonical keys (``module|opcode|shape``) of ops to leave out entirely."""
    alpha: float = 0.05
    """Significance level; per-op tests share it (Bonferroni)."""
    min_samples: int = 5
    """Fewer per-step samples than this on either side: that comparison is inconclusive."""
    min_matched_fraction: float = 0.25
    """Below this share of the baseline's op time matched in the candidate, the runs are taken to be
    different programs and the gate refuses them (exit 2) instead of reporting everything as new."""
    normalize_speed: bool = True
    """Judge step and op times relative to the machine's speed in each capture, estimated as the median
    ratio of the ops in common (at least ``MIN_OPS_FOR_SPEED`` of them above the floor). Captures made at
    different times on a shared machine differ by whole factors; this keeps that out of the verdict, at
    the price of not seeing a slowdown that hits every op alike. Turn it off on a quiet, dedicated
    machine."""
    noise_z: float = 3.0
    """A timing regression must also exceed this many times the noise between the two captures: the
    robust spread (1.4826 x MAD) of the log time ratios of the ops in common (at least
    ``MIN_OPS_FOR_NOISE`` of them). Per-step samples within one capture cannot see how differently
    two captures ran; the ops in common can. 0 turns this off."""
    source: str = "defaults"
    """Where the policy came from (files and flags); not a TOML key."""

    def to_dict(self) -> dict[str, Any]:
        """The policy as JSON-ready values."""
        d = asdict(self)
        d["fail_on_new"] = list(self.fail_on_new)
        d["ignore"] = list(self.ignore)
        return d


# key -> (python type, check, what the check requires)
_POLICY_KEYS: dict[str, tuple[type, Any, str]] = {
    "max_step_regression_pct": (float, lambda v: v >= 0, "a number >= 0"),
    "max_op_regression_pct": (float, lambda v: v >= 0, "a number >= 0"),
    "op_floor_us": (float, lambda v: v >= 0, "a number >= 0"),
    "fail_on_new": (tuple, lambda v: all(isinstance(s, str) and s for s in v), "a list of opcode names"),
    "new_op_min_bytes": (int, lambda v: v >= 0, "an integer >= 0"),
    "ignore": (tuple, lambda v: all(isinstance(s, str) and s for s in v), "a list of glob patterns"),
    "alpha": (float, lambda v: 0 < v < 1, "a number between 0 and 1"),
    "min_samples": (int, lambda v: v >= 2, "an integer >= 2"),
    "min_matched_fraction": (float, lambda v: 0 <= v <= 1, "a number between 0 and 1"),
    "normalize_speed": (bool, lambda v: True, "true or false"),
    "noise_z": (float, lambda v: v >= 0, "a number >= 0"),
}


def _coerce(key: str, value: Any, where: str) -> Any:
    """Check one policy value's type and range; ``where`` names the file and table for the message."""
    if key not in _POLICY_KEYS:
        close = difflib.get_close_matches(key, _POLICY_KEYS, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(_POLICY_KEYS)
        raise PolicyError(f"{where}: unknown key '{key}'", hint)
    kind, check, requirement = _POLICY_KEYS[key]
    ok_type: bool
    if kind is bool:
        ok_type = isinstance(value, bool)
    elif kind is float:
        ok_type = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok_type else value
    elif kind is int:
        ok_type = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok_type = isinstance(value, (list, tuple))
        value = tuple(value) if ok_type else value
    if not ok_type or not check(value):
        raise PolicyError(f"{where}: key '{key}' must be {requirement}, got {value!r}", "fix the policy")
    return value


def _policy_table(data: Mapping[str, Any], path: Path) -> tuple[Mapping[str, Any], str]:
    """The gate's table in a policy file: ``[tool.hlo-doctor.gate]``, ``[gate]`` or the top level."""
    tool = data.get("tool")
    if isinstance(tool, Mapping) and isinstance(tool.get("hlo-doctor"), Mapping):
        section = tool["hlo-doctor"].get("gate")
        if isinstance(section, Mapping):
            return section, f"[{POLICY_TABLE}]"
    if isinstance(data.get("gate"), Mapping):
        return data["gate"], "[gate]"
    if path.name == "pyproject.toml":
        raise PolicyError(f"{path}: no [{POLICY_TABLE}] table", "add one, or pass a policy file with --policy")
    return data, ""


def load_policy(path: Path, base: GatePolicy | None = None) -> GatePolicy:
    """Read a TOML policy file over ``base`` (defaults if None).

    The keys may sit in ``[tool.hlo-doctor.gate]`` (so a ``pyproject.toml`` works as is), in
    ``[gate]``, or at the top level of a file of their own.

    Raises:
        PolicyError: unreadable file, invalid TOML, an unknown key, a value of the wrong type or range.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolicyError(f"policy file {path} does not exist", "check the path given to --policy") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read policy file {path}: {exc}", "check the file") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: invalid TOML ({exc})", "fix the syntax") from None
    table, where = _policy_table(data, path)
    values = {key: _coerce(key, value, f"{path} {where}".rstrip()) for key, value in table.items()}
    policy = replace(base or GatePolicy(), **values)
    return replace(policy, source=str(path))


def find_policy_file(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.hlo-doctor.gate]`` table, from ``start`` upward.

    The search stops after the first directory that holds ``.git`` (the repository root), so a
    policy never leaks in from outside the repository.
    """
    for directory in (start.resolve(), *start.resolve().parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise PolicyError(f"{candidate}: invalid TOML ({exc})", "fix the syntax") from None
            tool = data.get("tool", {})
            if isinstance(tool, Mapping) and isinstance(tool.get("hlo-doctor"), Mapping) and (
                "gate" in tool["hlo-doctor"]
            ):
                return candidate
        if (directory / ".git").exists():
            return None
    return None


def resolve_policy(
    policy_file: Path | None, overrides: Mapping[str, Any], *, cwd: Path | None = None
) -> GatePolicy:
    """Defaults, then the policy file (``policy_file``, else the nearest pyproject.toml section),
    then ``overrides`` (flags; None values are skipped).

    Raises:
        PolicyError: as :func:`load_policy`; an override is checked like a file key and named as a flag.
    """
    path = policy_file if policy_file is not None else find_policy_file(cwd or Path.cwd())
    policy = load_policy(path) if path is not None else GatePolicy()
    given = {k: v for k, v in overrides.items() if v is not None and v != ()}
    if not given:
        return policy
    values = {k: _coerce(k, v, f"option --{k.replace('_', '-')}") for k, v in given.items()}
    flags = ", ".join("--" + k.replace("_", "-") for k in values)
    return replace(policy, **values, source=f"{policy.source} + flags ({flags})")


# --------------------------------------------------------------------------------------------------
# Inputs


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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = asdict(self)
        d["modules"] = list(self.modules)
        return d


def _module_base(name: str) -> str:
    return _PROGRAM_ID_SUFFIX.sub("", name)


def _device_kind(stats: OpStatsLike) -> str:
    kind = getattr(stats, "device_kind", "") or getattr(getattr(stats, "run", None), "device_kind", "")
    return str(kind or "")


def _aggregate(table: pd.DataFrame, label: str) -> pd.DataFrame:
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


def _per_op_samples(stats: OpStatsLike) -> dict[str, np.ndarray]:
    """Per-step time of each canonical key (0 in steps where it did not run); empty without samples."""
    per_step = getattr(stats, "per_step", None)
    if per_step is None or len(per_step) == 0 or "canonical_key" not in per_step.columns:
        return {}
    steps = sorted(per_step["step"].unique())
    pivot = (
        per_step.groupby(["canonical_key", "step"])["time_us"].sum().unstack("step").reindex(columns=steps)
    )
    pivot = pivot.fillna(0.0)
    return {str(key): row.to_numpy(dtype=float) for key, row in pivot.iterrows()}


def _finite(value: Any) -> float:
    """A float for the report: missing, NaN or infinite values become 0 (the JSON verdict has no NaN)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) else 0.0


def _summary(stats: OpStatsLike, label: str, agg: pd.DataFrame) -> RunSummary:
    return RunSummary(
        label=label,
        backend=str(getattr(stats, "backend", "") or ""),
        device_kind=_device_kind(stats),
        num_steps=int(getattr(stats, "num_steps", 0) or 0),
        step_time_us=_finite(getattr(stats, "step_time_us", 0.0)),
        modules=tuple(sorted(set(agg["module"]))),
        op_time_us=float(agg["time_per_step_us"].sum()),
    )


def _check_comparable(base: RunSummary, cand: RunSummary, matched_fraction: float, policy: GatePolicy) -> None:
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


# --------------------------------------------------------------------------------------------------
# Results


class Verdict(str, Enum):
    """The gate's answer."""

    PASS = "pass"
    REGRESSION = "regression"
    INCONCLUSIVE = "inconclusive"
    """Only under ``strict``: some change was within noise."""

    def __str__(self) -> str:
        return self.value

    @property
    def exit_code(self) -> ExitCode:
        """0 for pass; 1 for a regression or (strict) inconclusive."""
        return ExitCode.OK if self is Verdict.PASS else ExitCode.FINDINGS


@dataclass(frozen=True, slots=True)
class OpDiff:
    """One canonical key: its status in the two runs and how it was judged."""

    key: str
    module: str
    opcode: str
    category: str
    shape: str
    ops: str
    """Instruction names (candidate's when present), comma-separated."""
    status: str
    """``matched``, ``new`` (candidate only) or ``vanished`` (baseline only)."""
    baseline_us: float | None
    """Time per step in the baseline (None when new)."""
    candidate_us: float | None
    """Time per step in the candidate (None when vanished)."""
    bytes_written: int
    source: str
    judgement: str
    """``regressed``, ``improved``, ``no change``, ``within noise`` (slower, undecided; ``inconclusive``
    under strict), ``not slower, within noise``, ``below floor``, ``ignored``, ``new``,
    ``new: fails the gate``, ``vanished``."""
    comparison: SampleComparison | None = None

    @property
    def delta_us(self) -> float:
        """Candidate minus baseline time per step (a missing side counts as 0)."""
        return (self.candidate_us or 0.0) - (self.baseline_us or 0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "comparison"}
        d["delta_us"] = self.delta_us
        d["comparison"] = self.comparison.to_dict() if self.comparison else None
        return d


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason the gate fails."""

    rule: str
    """``step-time``, ``op-time`` or ``new-op``."""
    key: str
    """The canonical key (``step`` for step time)."""
    message: str
    time_per_step_us: float | None = None
    """The candidate's time per step of what regressed (the op, or the step)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GateResult:
    """Everything the gate decided, ready to render."""

    verdict: Verdict
    strict: bool
    policy: GatePolicy
    baseline: RunSummary
    candidate: RunSummary
    step: SampleComparison | None
    """Step-time comparison (None when neither run had a step time)."""
    step_judgement: str
    ops: tuple[OpDiff, ...]
    """Every key of either run: violations first, then by the size of the change."""
    violations: tuple[Violation, ...]
    within_noise: tuple[str, ...]
    """What could not be decided: ``step`` and/or canonical keys."""
    matched_fraction: float
    """Share of the baseline's op time whose keys the candidate also has."""
    speed_factor: float = 1.0
    """Candidate over baseline machine speed (time-weighted median op ratio); 1.0 when not normalized."""
    speed_ops: int = 0
    """Ops the speed factor was estimated from; 0 when not normalized."""
    capture_noise: float = 0.0
    """Robust spread (log scale) of the time ratios of the ops in common; 0 when not estimated."""
    notes: tuple[str, ...] = field(default=())

    @property
    def exit_code(self) -> ExitCode:
        """The process exit code for this verdict."""
        return self.verdict.exit_code

    def count(self, status: str) -> int:
        """Number of keys with this status (``matched``, ``new``, ``vanished``)."""
        return sum(1 for o in self.ops if o.status == status)

    def to_dict(self) -> dict[str, Any]:
        """The JSON verdict (schema ``hlo-doctor.gate/1``)."""
        return {
            "schema": JSON_SCHEMA,
            "verdict": str(self.verdict),
            "exit_code": int(self.exit_code),
            "strict": self.strict,
            "baseline": self.baseline.to_dict(),
            "candidate": self.candidate.to_dict(),
            "policy": self.policy.to_dict(),
            "step": {
                "judgement": self.step_judgement,
                "comparison": self.step.to_dict() if self.step else None,
            },
            "summary": {
                "matched": self.count("matched"),
                "new": self.count("new"),
                "vanished": self.count("vanished"),
                "violations": len(self.violations),
                "within_noise": len(self.within_noise),
                "matched_fraction": self.matched_fraction,
            },
            "speed": {"factor": self.speed_factor, "ops": self.speed_ops},
            "capture_noise": self.capture_noise,
            "violations": [v.to_dict() for v in self.violations],
            "within_noise": list(self.within_noise),
            "notes": list(self.notes),
            "ops": [o.to_dict() for o in self.ops],
        }


# --------------------------------------------------------------------------------------------------
# The gate


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


def _describe(row: pd.Series, key: str) -> str:
    ops = str(row.get("ops", "") or "")
    name = ops.split(", ")[0] if ops else str(row["opcode"])
    return f"{name} {row['shape']} in {row['module']}"


def _is_ignored(key: str, policy: GatePolicy) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in policy.ignore)


def _weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The value at which the cumulative weight reaches half (the lower one on an exact tie)."""
    order = np.argsort(values)
    v = np.asarray(values, dtype=float)[order]
    cum = np.cumsum(np.asarray(weights, dtype=float)[order])
    return float(v[int(np.searchsorted(cum, cum[-1] / 2.0))])


def _undecided_slowdown(cmp: SampleComparison) -> bool:
    """An inconclusive comparison in which the candidate is slower: a regression not ruled out.

    An inconclusive comparison with the candidate no slower (identical captures, a faster op) is no
    suspected regression, so it never makes a strict gate inconclusive.
    """
    return cmp.outcome is Outcome.INCONCLUSIVE and cmp.ratio > 1.0


def _judgement(cmp: SampleComparison, strict: bool) -> str:
    if cmp.outcome is Outcome.INCONCLUSIVE:
        if not _undecided_slowdown(cmp):
            return "not slower, within noise"
        return "inconclusive" if strict else "within noise"
    return str(cmp.outcome)


def gate(
    baseline: OpStatsLike,
    candidate: OpStatsLike,
    policy: GatePolicy | None = None,
    *,
    strict: bool = False,
    baseline_label: str = "baseline",
    candidate_label: str = "candidate",
) -> GateResult:
    """Compare ``candidate`` with ``baseline`` under ``policy``.

    Raises:
        InputError: the runs are not comparable: different backends or device kinds, no HLO module in
            common, or less than ``policy.min_matched_fraction`` of the baseline's op time matched.
    """
    policy = policy or GatePolicy()
    base_agg = _aggregate(baseline.table, baseline_label)
    cand_agg = _aggregate(candidate.table, candidate_label)
    base_sum = _summary(baseline, baseline_label, base_agg)
    cand_sum = _summary(candidate, candidate_label, cand_agg)
    common_keys = base_agg.index.intersection(cand_agg.index)
    base_total = float(base_agg["time_per_step_us"].sum())
    matched = float(base_agg.loc[common_keys, "time_per_step_us"].sum())
    matched_fraction = matched / base_total if base_total > 0 else (1.0 if len(common_keys) else 0.0)
    _check_comparable(base_sum, cand_sum, matched_fraction, policy)

    violations: list[Violation] = []
    within_noise: list[str] = []
    notes: list[str] = []

    # Ops present in both runs are judged above the floor, with per-step samples where both have them.
    b_samples, c_samples = _per_op_samples(baseline), _per_op_samples(candidate)
    if not (b_samples and c_samples):
        notes.append("no per-op per-step samples in at least one run: op times judged on their means alone")
    judged = [
        k for k in common_keys
        if not _is_ignored(k, policy)
        and max(base_agg.at[k, "time_per_step_us"], cand_agg.at[k, "time_per_step_us"]) >= policy.op_floor_us
    ]

    def typical(key: str, samples: dict[str, np.ndarray], agg: pd.DataFrame) -> float:
        if key in b_samples and key in c_samples:
            return float(np.median(samples[key]))
        return float(agg.at[key, "time_per_step_us"])

    speed, speed_ops = 1.0, 0
    if policy.normalize_speed:
        pairs = [(typical(k, b_samples, base_agg), typical(k, c_samples, cand_agg)) for k in judged]
        pairs = [(b, c) for b, c in pairs if b > 0 and c > 0]
        if len(pairs) >= MIN_OPS_FOR_SPEED:
            # The time-weighted median op ratio: how much faster or slower the candidate's machine ran
            # the same ops. Weighted by time because contention slows the big, memory-bound ops more
            # than the small ones (by both runs' times, so that swapping the runs inverts the factor);
            # a median, so that ops holding less than half of the time that really regressed move it
            # little.
            speed, speed_ops = _weighted_median([c / b for b, c in pairs], [b + c for b, c in pairs]), len(pairs)
            notes.append(
                f"machine speed: the {speed_ops} ops in common ran x{speed:.3f} their baseline time (time-weighted median "
                "ratio); step and op times are judged relative to that (normalize_speed)"
            )
        else:
            notes.append(
                f"only {len(pairs)} op(s) in common above the floor (need {MIN_OPS_FOR_SPEED}) to estimate the "
                "machine speed: times compared as captured"
            )

    # How much the ops in common disagree about the candidate's speed: the noise between the captures.
    ratios = [
        c / b for b, c in ((typical(k, b_samples, base_agg), typical(k, c_samples, cand_agg)) for k in judged)
        if b > 0 and c > 0
    ]
    capture_noise = 0.0
    if policy.noise_z > 0 and len(ratios) >= MIN_OPS_FOR_NOISE:
        # Spread around the speed the judgement assumes (1 when not normalized): ops that disagree
        # with it, in either direction, are what one capture-to-capture difference looks like.
        logs = np.log(ratios)
        capture_noise = float(1.4826 * np.median(np.abs(logs - math.log(speed))))
        notes.append(
            f"noise between the captures: the {len(ratios)} ops in common disagree by +-{math.expm1(capture_noise):.0%} "
            f"(robust spread of their time ratios); a timing regression must exceed "
            f"+{math.expm1(policy.noise_z * capture_noise):.0%} (noise_z = {policy.noise_z:g})"
        )
    elif policy.noise_z > 0:
        notes.append(
            f"only {len(ratios)} op(s) in common above the floor (need {MIN_OPS_FOR_NOISE}) to estimate the noise "
            "between the captures: timing judged on the per-step samples alone, which do not see it"
        )

    def within_capture_noise(cmp: SampleComparison) -> SampleComparison:
        """A regression (or improvement) the per-step test found, demoted to inconclusive when the
        captures disagree more than it."""
        if cmp.outcome not in (Outcome.REGRESSED, Outcome.IMPROVED) or capture_noise <= 0:
            return cmp
        if abs(math.log(cmp.ratio)) > policy.noise_z * capture_noise:
            return cmp
        return replace(cmp, outcome=Outcome.INCONCLUSIVE, reason=(
            f"{cmp.reason}; but within the noise between the two captures "
            f"(+{math.expm1(policy.noise_z * capture_noise):.0%} needed)"
        ))

    # Step time.
    b_steps = np.asarray(list(getattr(baseline, "step_times_us", ()) or ()), dtype=float) * speed
    c_steps = np.asarray(list(getattr(candidate, "step_times_us", ()) or ()), dtype=float)
    step_effect = policy.max_step_regression_pct / 100.0
    step: SampleComparison | None
    if b_steps.size and c_steps.size:
        step = compare_samples(
            b_steps, c_steps, min_effect=step_effect, alpha=policy.alpha, min_samples=policy.min_samples
        )
    elif base_sum.step_time_us > 0 and cand_sum.step_time_us > 0:
        step = compare_point_estimates(base_sum.step_time_us * speed, cand_sum.step_time_us, min_effect=step_effect)
        notes.append("no per-step wall times in at least one run: step time judged on the mean alone")
    else:
        step = None
        notes.append("no step time in at least one run: step time not judged")
    step = within_capture_noise(step) if step else None
    step_judgement = _judgement(step, strict) if step else "not judged"
    if step and step.outcome is Outcome.REGRESSED:
        adjusted = f", against the baseline x{speed:.3f} machine speed" if speed != 1.0 else ""
        violations.append(Violation(
            "step-time", "step",
            f"step time {step.baseline_median / speed:,.0f} -> {step.candidate_median:,.0f} us (median{adjusted}): "
            f"{step.reason}",
            step.candidate_median,
        ))
    elif step and _undecided_slowdown(step):
        within_noise.append("step")

    op_alpha = policy.alpha / max(1, len(judged))
    op_effect = policy.max_op_regression_pct / 100.0
    diffs: list[OpDiff] = []
    failing: set[str] = set()

    def make(key: str, row: pd.Series, status: str, b_us: float | None, c_us: float | None,
             judgement: str, comparison: SampleComparison | None = None) -> OpDiff:
        return OpDiff(
            key=key, module=str(row["module"]), opcode=str(row["opcode"]), category=str(row["category"]),
            shape=str(row["shape"]), ops=str(row["ops"]), status=status, baseline_us=b_us, candidate_us=c_us,
            bytes_written=int(row.get("bytes_written", 0) or 0), source=str(row.get("source", "") or ""),
            judgement=judgement, comparison=comparison,
        )

    judged_set = set(judged)
    for key in common_keys:
        row = cand_agg.loc[key]
        b_us, c_us = float(base_agg.at[key, "time_per_step_us"]), float(row["time_per_step_us"])
        if _is_ignored(key, policy):
            diffs.append(make(key, row, "matched", b_us, c_us, "ignored"))
            continue
        if key not in judged_set:
            diffs.append(make(key, row, "matched", b_us, c_us, "below floor"))
            continue
        if key in b_samples and key in c_samples:
            cmp = compare_samples(
                b_samples[key] * speed, c_samples[key], min_effect=op_effect, alpha=op_alpha,
                min_samples=policy.min_samples,
            )
        else:
            cmp = compare_point_estimates(b_us * speed, c_us, min_effect=op_effect)
        cmp = within_capture_noise(cmp)
        diffs.append(make(key, row, "matched", b_us, c_us, _judgement(cmp, strict), cmp))
        if cmp.outcome is Outcome.REGRESSED:
            failing.add(key)
            violations.append(Violation(
                "op-time", key,
                f"{_describe(row, key)}: {b_us:,.1f} -> {c_us:,.1f} us/step (mean): {cmp.reason}",
                c_us,
            ))
        elif _undecided_slowdown(cmp):
            within_noise.append(key)

    # Ops only in the candidate: the waste that came back.
    convert_only = _convert_only_modules(cand_agg)
    for key in cand_agg.index.difference(base_agg.index, sort=False):
        row = cand_agg.loc[key]
        c_us = float(row["time_per_step_us"])
        if _is_ignored(key, policy):
            diffs.append(make(key, row, "new", None, c_us, "ignored"))
            continue
        kind = _fails_when_new(row, policy, convert_only)
        if kind:
            failing.add(key)
            pct = f", {c_us / cand_sum.step_time_us:.1%} of the step" if cand_sum.step_time_us > 0 else ""
            what = {"aliasing-copy": "aliasing copy", "standalone-convert": "standalone convert"}.get(
                kind, f"'{kind}' op")
            violations.append(Violation(
                "new-op", key,
                f"new {what} {_describe(row, key)}: {c_us:,.1f} us/step{pct}, "
                f"{int(row['bytes_written']):,} bytes written",
                c_us,
            ))
            diffs.append(make(key, row, "new", None, c_us, "new: fails the gate"))
        else:
            diffs.append(make(key, row, "new", None, c_us, "new"))

    for key in base_agg.index.difference(cand_agg.index, sort=False):
        row = base_agg.loc[key]
        judgement = "ignored" if _is_ignored(key, policy) else "vanished"
        diffs.append(make(key, row, "vanished", float(row["time_per_step_us"]), None, judgement))

    diffs.sort(key=lambda d: (d.key not in failing, -abs(d.delta_us), d.key))
    # New ops that fail first, in time order, then the rest.
    violations.sort(key=lambda v: ({"new-op": 0, "op-time": 1, "step-time": 2}[v.rule], -(v.time_per_step_us or 0)))

    if violations:
        verdict = Verdict.REGRESSION
    elif strict and within_noise:
        verdict = Verdict.INCONCLUSIVE
    else:
        verdict = Verdict.PASS
    return GateResult(
        verdict=verdict, strict=strict, policy=policy, baseline=base_sum, candidate=cand_sum,
        step=step, step_judgement=step_judgement, ops=tuple(diffs), violations=tuple(violations),
        within_noise=tuple(within_noise), matched_fraction=matched_fraction, speed_factor=speed,
        speed_ops=speed_ops, capture_noise=capture_noise, notes=tuple(notes),
    )


# --------------------------------------------------------------------------------------------------
# Renderers (strings; the CLI decides where they go)


def render_json(result: GateResult) -> str:
    """The JSON verdict (strict JSON: no NaN)."""
    return json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _pct(d: OpDiff) -> str:
    """The change the judgement is about: of the per-step medians (of the means without samples),
    against the baseline scaled by the machine-speed factor."""
    if d.baseline_us is None or d.candidate_us is None:
        return "new" if d.baseline_us is None else "gone"
    if d.comparison is not None and math.isfinite(d.comparison.ratio):
        return f"{d.comparison.change_pct:+.1f}%"
    if d.baseline_us == 0:
        return "-"
    return f"{(d.candidate_us / d.baseline_us - 1) * 100:+.1f}%"


def _headline(result: GateResult) -> str:
    if result.verdict is Verdict.REGRESSION:
        n = len(result.violations)
        return f"FAIL: {n} regression{'s' if n != 1 else ''}"
    if result.verdict is Verdict.INCONCLUSIVE:
        return f"INCONCLUSIVE (strict): {len(result.within_noise)} change(s) within noise"
    noise = f", {len(result.within_noise)} change(s) within noise" if result.within_noise else ""
    return f"PASS: no regression{noise}"


def _step_line(result: GateResult) -> str:
    s = result.step
    if s is None:
        return "step time: not judged"
    ci = f", {1 - s.alpha:.0%} CI x{s.ci_low:.3f}..x{s.ci_high:.3f}, p={s.p_value:.2g}" if s.tested else ""
    speed = result.speed_factor
    against = f" against the baseline x{speed:.3f} machine speed" if speed != 1.0 else ""
    return (
        f"step time (median): {s.baseline_median / speed:,.0f} -> {s.candidate_median:,.0f} us "
        f"({s.change_pct:+.1f}%{against}{ci}; n={s.n_baseline}/{s.n_candidate}): {result.step_judgement}"
    )


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(result: GateResult, *, max_rows: int = 15, max_violations: int = 30) -> str:
    """A summary for a pull-request comment: verdict, violations, step time, new/vanished/changed ops."""
    icon = {Verdict.PASS: ":white_check_mark:", Verdict.REGRESSION: ":x:", Verdict.INCONCLUSIVE: ":warning:"}
    lines = [
        f"### hlo-doctor gate: {icon[result.verdict]} {_headline(result)}",
        "",
        f"Baseline `{result.baseline.label}` vs candidate `{result.candidate.label}` "
        f"({result.candidate.backend or 'unknown backend'}{', ' + result.candidate.device_kind if result.candidate.device_kind else ''}; "
        f"{result.baseline.num_steps} / {result.candidate.num_steps} steps). "
        f"Matched {result.count('matched')} ops ({result.matched_fraction:.0%} of the baseline's op time), "
        f"{result.count('new')} new, {result.count('vanished')} vanished.",
        "",
        f"**{_step_line(result)}**",
        "",
    ]
    if result.violations:
        lines += ["| rule | what | time/step (us) |", "|---|---|---:|"]
        # A pull-request comment has a size limit: the JSON verdict keeps every violation.
        shown_violations = result.violations[:max_violations]
        lines += [
            f"| `{v.rule}` | {_md_escape(v.message)} | {_us(v.time_per_step_us)} |" for v in shown_violations
        ]
        if len(result.violations) > max_violations:
            lines.append(f"| ... | {len(result.violations) - max_violations} more in the JSON verdict | |")
        lines.append("")

    def table(title: str, rows: list[OpDiff]) -> None:
        if not rows:
            return
        lines.extend([
            f"**{title}**", "",
            "| op | shape | module | baseline us/step | candidate us/step | change | judgement |",
            "|---|---|---|---:|---:|---:|---|",
        ])
        for d in rows[:max_rows]:
            lines.append(
                f"| `{_md_escape(d.ops.split(', ')[0] or d.opcode)}` ({d.opcode}) | `{_md_escape(d.shape)}` | "
                f"`{_md_escape(d.module)}` | {_us(d.baseline_us)} | {_us(d.candidate_us)} | {_pct(d)} | {d.judgement} |"
            )
        if len(rows) > max_rows:
            lines.append(f"| ... {len(rows) - max_rows} more | | | | | | |")
        lines.append("")

    table("New ops", [d for d in result.ops if d.status == "new"])
    table("Vanished ops", [d for d in result.ops if d.status == "vanished"])
    changed = [d for d in result.ops if d.status == "matched" and d.judgement not in ("below floor", "ignored")]
    table("Largest changes among matched ops", changed)
    if result.ops:
        lines += [f"<sub>{_legend(result)}</sub>", ""]
    for note in result.notes:
        lines.append(f"> {note}")
    p = result.policy
    lines += [
        "",
        "<details><summary>Policy</summary>",
        "",
        f"From {p.source}: step time +{p.max_step_regression_pct:g}% max; op time +{p.max_op_regression_pct:g}% "
        f"max above {p.op_floor_us:g} us/step; new {', '.join(p.fail_on_new) or 'nothing'} of at least "
        f"{p.new_op_min_bytes:,} bytes fail; alpha {p.alpha:g}"
        f"{' (Bonferroni across ops)' if p.alpha else ''}; ignore {', '.join(p.ignore) or 'nothing'}"
        f"{'; strict' if result.strict else ''}.",
        "",
        "</details>",
        "",
    ]
    return "\n".join(lines)


def render_junit(result: GateResult) -> str:
    """JUnit XML: one test case for the step time, one per judged or new op; failures are violations
    (and, under strict, changes within noise)."""
    suite = ET.Element("testsuite", name="hlo-doctor gate")
    cases: list[tuple[str, str, str | None, str]] = []  # name, classname, failure message, output
    by_key = {v.key: v for v in result.violations}
    step_fail = by_key.get("step")
    step_msg = step_fail.message if step_fail else (
        _step_line(result) if result.strict and "step" in result.within_noise else None
    )
    cases.append(("step time", "gate.step", step_msg, _step_line(result)))
    for d in result.ops:
        if d.judgement in ("below floor", "ignored", "vanished") or d.status == "vanished":
            continue
        v = by_key.get(d.key)
        msg = v.message if v else (
            f"{d.key}: inconclusive ({d.comparison.reason if d.comparison else ''})"
            if d.judgement == "inconclusive" else None
        )
        kind = "new op" if d.status == "new" else "op time"
        out = f"{d.key}: {_us(d.baseline_us)} -> {_us(d.candidate_us)} us/step ({_pct(d)}): {d.judgement}"
        cases.append((f"{kind}: {d.key}", f"gate.{d.module}", msg, out))
    failures = 0
    for name, classname, msg, out in cases:
        case = ET.SubElement(suite, "testcase", name=name, classname=classname, time="0")
        if msg is not None:
            failures += 1
            ET.SubElement(case, "failure", message=msg, type="regression").text = msg
        ET.SubElement(case, "system-out").text = out
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", "0")
    root = ET.Element("testsuites", name="hlo-doctor", tests=str(len(cases)), failures=str(failures))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _legend(result: GateResult) -> str:
    scaled = f" x{result.speed_factor:.3f} (machine speed)" if result.speed_factor != 1.0 else ""
    return (
        "us: mean time per step; change: of the per-step median (of the mean without samples) against "
        f"the baseline{scaled}"
    )


def render_text(result: GateResult, *, max_rows: int = 20) -> str:
    """Plain text for a log or ``--format table --output FILE``."""
    lines = [
        f"hlo-doctor gate: {_headline(result)}",
        f"baseline  {result.baseline.label}  ({result.baseline.num_steps} steps)",
        f"candidate {result.candidate.label}  ({result.candidate.num_steps} steps)",
        _step_line(result),
    ]
    for v in result.violations:
        lines.append(f"  FAIL [{v.rule}] {v.message}")
    shown = [d for d in result.ops if d.judgement not in ("below floor", "ignored")][:max_rows]
    if shown:
        lines.append(f"{'op':<28} {'shape':<26} {'module':<26} {'base us':>10} {'cand us':>10} {'change':>8}  judgement")
        for d in shown:
            name = (d.ops.split(", ")[0] or d.opcode)[:28]
            lines.append(
                f"{name:<28} {d.shape[:26]:<26} {d.module[:26]:<26} {_us(d.baseline_us):>10} "
                f"{_us(d.candidate_us):>10} {_pct(d):>8}  {d.judgement}"
            )
        lines.append(_legend(result))
    lines.extend(f"note: {n}" for n in result.notes)
    return "\n".join(lines) + "\n"
