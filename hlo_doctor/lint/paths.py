"""Source paths in finding messages, as a person at this checkout reads them.

A capture names files as they were on the machine that made it (``/srv/app/checkout/pkg/mod.py``).
In a message the path is shown relative to the working folder: the file itself when it is under it,
else the longest tail of two parts or more that names a file under it (the same project checked
out elsewhere), else as :func:`hlo_doctor.core.format.fmt_path` writes it (installed packages
relative to their install folder, the standard library to its own).
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from hlo_doctor.core.format import fmt_path

_MIN_TAIL_PARTS = 2
"""A foreign path maps onto the working folder by at least this many trailing parts (a bare
``utils.py`` could be any file)."""


def shown_path(path: str) -> str:
    """``path`` as a message shows it (see the module's docstring)."""
    shown = fmt_path(path)
    if not os.path.isabs(shown):
        return shown
    cwd = os.getcwd()
    parts = PurePosixPath(path.replace("\\", "/")).parts[1:]
    for start in range(len(parts) - _MIN_TAIL_PARTS + 1):
        tail = os.path.join(*parts[start:])
        if os.path.isfile(os.path.join(cwd, tail)):
            return PurePosixPath(*parts[start:]).as_posix()
    return shown


def shown_source(path: str, line: int | None) -> str:
    """``path:line`` with the path as :func:`shown_path` writes it."""
    return f"{shown_path(path)}:{line}" if line else shown_path(path)
