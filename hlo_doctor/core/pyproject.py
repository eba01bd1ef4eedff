"""Finding and reading ``[tool.hlo-doctor]`` in the nearest pyproject.toml, for every stage that has
settings there (the commands' defaults, the gate's policy); and a setting of seconds read from the
environment (:func:`env_seconds`).

The search runs from a folder upward and stops at the repository root (the first folder holding
``.git``); outside a repository only the starting folder counts (:mod:`hlo_doctor.core.lookup`), so
settings never leak in from a parent folder others can write into.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import HloDoctorError, InputError
from hlo_doctor.core.lookup import repository_root, search_folders

__all__ = ["env_seconds", "find_pyproject", "repository_root", "tool_table", "unknown_key_hint"]


def env_seconds(name: str, default: float, unset: str) -> float:
    """The number of seconds the environment variable ``name`` sets, else ``default``; ``unset`` says
    what unsetting it gives (the hint of the error).

    Raises:
        InputError: a value that is not a number of seconds above 0.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{name}={raw!r} is not a number of seconds above 0", f"unset it ({unset}) or set e.g. {name}=5")
    return value


def tool_table(path: Path, error: type[HloDoctorError] = InputError) -> Mapping[str, Any] | None:
    """``[tool.hlo-doctor]`` of the pyproject.toml at ``path``, None without one; a file that is not
    TOML raises ``error`` naming it."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise error(f"{path}: invalid TOML ({exc})", "fix the syntax") from None
    except RecursionError:
        raise error(f"{path}: TOML nested too deeply (past the interpreter's stack)", "fix the file") from None
    tool = data.get("tool")
    table = tool.get("hlo-doctor") if isinstance(tool, Mapping) else None
    return table if isinstance(table, Mapping) else None


def find_pyproject(start: Path, wanted: Callable[[Mapping[str, Any]], bool] = lambda table: True,
                   error: type[HloDoctorError] = InputError) -> Path | None:
    """The nearest ``pyproject.toml`` from ``start`` up to the repository root (outside one: ``start``) whose ``[tool.hlo-doctor]``
    table exists and is ``wanted``; None when there is none."""
    for directory in search_folders(start):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            table = tool_table(candidate, error)
            if table is not None and wanted(table):
                return candidate
    return None


def unknown_key_hint(key: str, known: Iterable[str]) -> str:
    """What to say about an unknown settings key: ``did you mean 'select'?`` when one is close, else
    the known keys (a typo never silently turns a setting off)."""
    names = list(known)
    close = difflib.get_close_matches(key, names, n=1)
    return f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(names)
