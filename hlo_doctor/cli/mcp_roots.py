"""The folders an MCP server may read and write: every path a tool takes is checked here first.

A path is taken as given when absolute, else relative to each root in turn (the first that holds
it). It must not name ``..``, and once its links are resolved it must lie inside a root; a folder
it names must hold no link that leads out of the roots (a capture's files are found by globbing
the folder, so such a link would be read). Each refusal is an :class:`InputError` that names the
path, which the server answers as a tool error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePath

from hlo_doctor.core.errors import InputError

__all__ = ["MAX_ENTRIES", "Roots"]

MAX_ENTRIES = 200_000
"""Most entries of a folder that are checked for links leaving the roots (past it: refused)."""


@dataclass(frozen=True, slots=True)
class Roots:
    """The resolved folders the server was started with (``--root``), in order."""

    folders: tuple[Path, ...]

    @classmethod
    def of(cls, folders: tuple[Path, ...] | list[Path]) -> Roots:
        """Resolve and check the ``--root`` folders; :class:`InputError` for one that is not a folder."""
        resolved = []
        for folder in folders:
            path = Path(folder).expanduser().resolve()
            if not path.is_dir():
                raise InputError(f"--root {folder}: not a folder", "pass folders that exist")
            resolved.append(path)
        if not resolved:
            raise InputError("no --root given", "pass the folders the server may read: --root DIR (repeatable)")
        return cls(tuple(resolved))

    def holds(self, path: Path) -> bool:
        """Whether the resolved ``path`` lies inside one of the roots (or is one)."""
        return any(path == root or path.is_relative_to(root) for root in self.folders)

    def path(self, given: str, what: str = "path", *, must_exist: bool = True, kind: str = "") -> Path:
        """The resolved path of ``given`` inside the roots.

        ``kind``: ``file`` or ``dir`` to require one; ``must_exist`` False for a file to be written.
        Raises:
            InputError: ``given`` is empty, names ``..``, leaves the roots (directly or through a
                link), does not exist, or is of the wrong kind.
        """
        if not given or not str(given).strip():
            raise InputError(f"{what}: empty", "pass a path inside " + self.listing())
        pure = PurePath(given)
        if ".." in pure.parts:
            raise InputError(f"{what} {given}: '..' is not accepted", "pass the path without '..' (inside "
                             + self.listing() + ")")
        candidates = [Path(given).expanduser()] if pure.is_absolute() else [root / given for root in self.folders]
        chosen = next((c for c in candidates if c.exists()), candidates[0])
        resolved = chosen.resolve()
        if not self.holds(resolved):
            raise InputError(f"{what} {given}: outside the folders this server may read",
                             "pass a path inside " + self.listing())
        if must_exist and not resolved.exists():
            raise InputError(f"{what} {given}: no such file or directory", "pass a path inside " + self.listing())
        if kind == "file" and resolved.exists() and not resolved.is_file():
            raise InputError(f"{what} {given}: not a file", "pass a file")
        if kind == "dir" and resolved.exists() and not resolved.is_dir():
            raise InputError(f"{what} {given}: not a folder", "pass a folder")
        if resolved.is_dir():
            self._no_link_out(resolved, given, what)
        return resolved

    def _no_link_out(self, folder: Path, given: str, what: str) -> None:
        """Refuse a folder that holds a link resolving outside the roots; links to folders inside the
        roots are walked too, as the capture readers' globs go through them."""
        seen, visited, todo = 0, {folder}, [folder]
        while todo:
            try:
                entries = list(os.scandir(todo.pop()))
            except OSError:
                continue  # unreadable: the reader names it, if it needs it
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    raise InputError(f"{what} {given}: more than {MAX_ENTRIES:,} entries to check",
                                     "pass the run folder itself, not a folder above it")
                path = Path(entry.path)
                if entry.is_symlink():
                    target = path.resolve()
                    if not self.holds(target):
                        raise InputError(f"{what} {given}: {path} is a link that leaves the folders this "
                                         "server may read", "remove the link, or start the server with a "
                                         "--root that holds its target")
                    if target.is_dir() and target not in visited:
                        visited.add(target)
                        todo.append(target)
                elif entry.is_dir(follow_symlinks=False):
                    todo.append(path)

    def listing(self) -> str:
        """The roots, for messages: ``/a/logs, /b/src``."""
        return ", ".join(str(r) for r in self.folders)
