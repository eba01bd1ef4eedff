"""``[tool.hlo-doctor]`` in pyproject.toml: defaults for every command that has options there.

Read from the nearest ``pyproject.toml`` from the working folder up to the repository root:

- ``[tool.hlo-doctor]``: ``select``, ``ignore``, ``fail-on``, ``rules``, ``source``, ``source-root``
  (for ``diagnose``), ``frameworks`` (for every command: dotted module prefixes whose frames are
  framework internals, added to :data:`hlo_doctor.hlo.frames.DEFAULT_FRAMEWORKS`: a finding's or an
  op's line is the first frame outside them), ``scheduler`` (the Dask scheduler ``stats``, ``diagnose``
  and ``gate`` read host files on: their ``--scheduler`` default), and the tables below;
- ``[tool.hlo-doctor.diagnose]``: the same keys, for ``diagnose`` alone (they win);
- ``[tool.hlo-doctor.gate]``: the gate's policy (:mod:`hlo_doctor.gate.policy` reads and checks it).

Keys are written with dashes or underscores. A key no command knows exits 2 with a suggestion, as the
gate's policy does: a typo never silently turns a setting off. Flags on the command line win.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.pyproject import find_pyproject, repository_root, tool_table, unknown_key_hint

__all__ = ["TABLE", "default_map", "find_pyproject", "repository_root"]

TABLE = "tool.hlo-doctor"

# key (underscores) -> (click parameter of diagnose, kind)
_DIAGNOSE_KEYS: dict[str, tuple[str, str]] = {
    "select": ("select", "codes"),
    "ignore": ("ignore", "codes"),
    "fail_on": ("fail_on", "text"),
    "rules": ("rules_dirs", "paths"),
    "source": ("source", "path"),
    "source_root": ("source_root", "path"),
}
_SUBTABLES = ("diagnose", "gate")
_GLOBAL_KEYS = ("frameworks", "scheduler")
# Commands that read captures of several host files: ``scheduler`` is their --scheduler default.
_HOST_COMMANDS = ("stats", "diagnose", "gate")


def _unknown(key: str, where: str, known: list[str]) -> InputError:
    return InputError(f"{where}: unknown key '{key}'", unknown_key_hint(key, known))


def _value(key: str, value: Any, kind: str, where: str, base: Path) -> Any:
    if kind == "text":
        if not isinstance(value, str):
            raise InputError(f"{where}: key '{key}' must be a string, got {value!r}", "fix pyproject.toml")
        return value
    if kind == "path":
        if not isinstance(value, str):
            raise InputError(f"{where}: key '{key}' must be a path, got {value!r}", "fix pyproject.toml")
        return base / value
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise InputError(f"{where}: key '{key}' must be a list of strings, got {value!r}", "fix pyproject.toml")
    return [base / v for v in items] if kind == "paths" else list(items)


def _diagnose_defaults(table: Mapping[str, Any], where: str, base: Path, *, allow: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    known = [k.replace("_", "-") for k in (*_DIAGNOSE_KEYS, *allow)]
    for raw, value in table.items():
        key = raw.replace("-", "_")
        if key in allow:
            continue
        if key not in _DIAGNOSE_KEYS:
            raise _unknown(raw, where, known)
        param, kind = _DIAGNOSE_KEYS[key]
        out[param] = _value(raw, value, kind, where, base)
    return out


def _frameworks(table: Mapping[str, Any], where: str) -> list[str]:
    """``frameworks = ["mylib.internal", ...]``: dotted module prefixes (``/`` read as ``.``)."""
    value = table.get("frameworks", [])
    names = _value("frameworks", value, "codes", where, Path("."))
    bad = [n for n in names if not n.strip(" /.") or any(c.isspace() for c in n.strip())]
    if bad:
        raise InputError(f"{where}: 'frameworks' entry {bad[0]!r} is not a module path",
                         'write dotted module prefixes: frameworks = ["mylib.internal"]')
    return names


def default_map(start: Path) -> dict[str, Any]:
    """Click's ``default_map`` from the nearest pyproject.toml (empty without one).

    Also sets the framework list (``frameworks``) for this process, or resets it to the defaults
    when the file has none: every command reads its lines through it.

    Raises:
        InputError: invalid TOML, an unknown key (with a suggestion), a value of the wrong type.
    """
    # Here, not at the top: the hlo package imports numpy, which --help and --version never need.
    from hlo_doctor.hlo.frames import set_extra_frameworks

    set_extra_frameworks(())
    path = find_pyproject(start)
    if path is None:
        return {}
    table = tool_table(path) or {}
    base = path.parent
    set_extra_frameworks(_frameworks(table, f"{path} [{TABLE}]"))
    diagnose = _diagnose_defaults(table, f"{path} [{TABLE}]", base, allow=(*_SUBTABLES, *_GLOBAL_KEYS))
    section = table.get("diagnose")
    if isinstance(section, Mapping):
        diagnose.update(_diagnose_defaults(section, f"{path} [{TABLE}.diagnose]", base, allow=()))
    elif section is not None:
        raise InputError(f"{path} [{TABLE}]: 'diagnose' must be a table", "write [tool.hlo-doctor.diagnose]")
    out: dict[str, Any] = {"diagnose": diagnose} if diagnose else {}
    if "scheduler" in table:
        scheduler = _value("scheduler", table["scheduler"], "text", f"{path} [{TABLE}]", base)
        for command in _HOST_COMMANDS:
            out.setdefault(command, {})["scheduler"] = scheduler
    return out
