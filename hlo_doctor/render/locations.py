"""Source locations as a checkout sees them: a captured path made relative to a source root."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

__all__ = ["map_source"]

_MIN_SUFFIX_PARTS = 2
"""A path from another machine maps onto the root by at least this many trailing parts (a bare
``utils.py`` could be any file)."""


def map_source(path: str, root: Path) -> str | None:
    """``path`` relative to ``root`` (POSIX), or None when no file under ``root`` is it.

    A relative path is taken as relative to the root. An absolute one outside the root (captured on
    another machine) maps by its longest trailing part that names a file under the root.
    """
    p = PurePosixPath(path.replace("\\", "/"))
    if not p.is_absolute():
        return p.as_posix()
    try:
        return Path(p).relative_to(root).as_posix()
    except ValueError:
        pass
    parts = p.parts[1:]
    for start in range(len(parts) - _MIN_SUFFIX_PARTS + 1):
        tail = PurePosixPath(*parts[start:])
        if (root / tail).is_file():
            return tail.as_posix()
    return None
