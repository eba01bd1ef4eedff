"""Where settings are looked up: from a folder upward to its repository root, never beyond.

A ``pyproject.toml`` in a parent that other people can write into (``/tmp``, a shared home) must never
set policy or defaults silently, so outside a repository only the starting folder itself counts.
"""

from __future__ import annotations

from pathlib import Path


def search_folders(start: Path) -> list[Path]:
    """``start`` and its parents up to the nearest one holding ``.git`` (the repository root), in that
    order; just ``[start]`` when no parent holds ``.git``."""
    start = start.resolve()
    folders: list[Path] = []
    for directory in (start, *start.parents):
        folders.append(directory)
        if (directory / ".git").exists():
            return folders
    return [start]


def repository_root(start: Path) -> Path:
    """The nearest folder from ``start`` upward that holds ``.git``; ``start`` itself outside a repository."""
    return search_folders(start)[-1]
