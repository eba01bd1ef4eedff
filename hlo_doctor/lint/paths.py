"""Source paths in finding messages, as a person at this checkout reads them.

A capture names files as they were on the machine that made it (``/srv/app/checkout/pkg/mod.py``).
In a message the path is shown as :func:`hlo_doctor.core.format.fmt_path` writes it: relative to the
working folder when the file is under it, else by the longest tail of two parts or more that names a
file under it (the same project checked out elsewhere), installed packages relative to their install
folder, the standard library to its own.
"""

from __future__ import annotations

from hlo_doctor.core.format import fmt_path


def shown_path(path: str) -> str:
    """``path`` as a message shows it (see the module's docstring)."""
    return fmt_path(path)


def shown_source(path: str, line: int | None) -> str:
    """``path:line`` with the path as :func:`shown_path` writes it."""
    return f"{shown_path(path)}:{line}" if line else shown_path(path)
