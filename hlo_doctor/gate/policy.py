"""The gate's policy: what counts as a regression, read from TOML files, pyproject.toml and flags.

:class:`GatePolicy`, read from a TOML file (:func:`load_policy`), from ``[tool.hlo-doctor.gate]`` in the
nearest ``pyproject.toml`` (:func:`find_policy_file`), and from command-line overrides
(:func:`resolve_policy`). An invalid policy raises :class:`PolicyError` naming the file and the key
(exit 2).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import HloDoctorError
from hlo_doctor.core.pyproject import find_pyproject, unknown_key_hint

__all__ = ["POLICY_TABLE", "GatePolicy", "PolicyError", "find_policy_file", "load_policy", "resolve_policy"]

POLICY_TABLE = "tool.hlo-doctor.gate"


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
    max_peak_growth_pct: float = 10.0
    """Largest allowed growth of a program's peak device memory, in percent of the baseline's (from
    the captures' buffer assignments: compile-time figures, judged without statistics)."""
    peak_floor_bytes: int = 1 << 20
    """A peak that grows by less than this many bytes passes whatever its percentage."""
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
    "max_peak_growth_pct": (float, lambda v: v >= 0, "a number >= 0"),
    "peak_floor_bytes": (int, lambda v: v >= 0, "an integer >= 0"),
}


def _coerce(key: str, value: Any, where: str) -> Any:
    """Check one policy value's type and range; ``where`` names the file and table for the message."""
    if key not in _POLICY_KEYS:
        raise PolicyError(f"{where}: unknown key '{key}'", unknown_key_hint(key, _POLICY_KEYS))
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
    except RecursionError:
        raise PolicyError(f"{path}: TOML nested too deeply (arrays or tables within each other past the "
                          "interpreter's stack)", "a policy is one flat table") from None
    table, where = _policy_table(data, path)
    values = {key: _coerce(key, value, f"{path} {where}".rstrip()) for key, value in table.items()}
    policy = replace(base or GatePolicy(), **values)
    return replace(policy, source=str(path))


def find_policy_file(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.hlo-doctor.gate]`` table, from ``start`` upward.

    The search stops after the first directory that holds ``.git`` (the repository root); outside a
    repository only ``start`` itself is searched, so a policy never leaks in from a parent folder.
    """
    return find_pyproject(start, lambda table: "gate" in table, PolicyError)


def resolve_policy(
    policy_file: Path | None, overrides: Mapping[str, Any], *, cwd: Path | None = None, search: bool = True
) -> GatePolicy:
    """Defaults, then the policy file (``policy_file``, else the nearest pyproject.toml section, unless
    ``search`` is false), then ``overrides`` (flags; None values are skipped).

    Raises:
        PolicyError: as :func:`load_policy`; an override is checked like a file key and named as a flag.
    """
    path = policy_file if policy_file is not None or not search else find_policy_file(cwd or Path.cwd())
    policy = load_policy(path) if path is not None else GatePolicy()
    given = {k: v for k, v in overrides.items() if v is not None and v != ()}
    if not given:
        return policy
    values = {k: _coerce(k, v, f"option --{k.replace('_', '-')}") for k, v in given.items()}
    flags = ", ".join("--" + k.replace("_", "-") for k in values)
    return replace(policy, **values, source=f"{policy.source} + flags ({flags})")
