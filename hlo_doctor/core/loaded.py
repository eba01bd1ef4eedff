"""Whether a module has been run, asked without importing it (nor creating the lazy module of
:mod:`hlo_doctor.core.lazy`: this module has no side effect, so the light commands can ask it)."""

from __future__ import annotations

import sys
from types import ModuleType

__all__ = ["is_pandas_na", "loaded"]


def loaded(name: str) -> ModuleType | None:
    """The module ``name`` where it has been run, else None, importing nothing: a lazy module not
    read yet is not loaded (reading any attribute of it, ``pandas.NA`` too, would load it)."""
    module = sys.modules.get(name)
    # (type(), not .__class__: an attribute read loads a lazy module; a loaded one is a plain module.)
    return module if module is not None and type(module) is ModuleType else None


def is_pandas_na(value: object) -> bool:
    """Whether ``value`` is pandas's ``NA``, which exists only once pandas is loaded: no import for it."""
    pandas = loaded("pandas")
    return pandas is not None and value is pandas.NA
