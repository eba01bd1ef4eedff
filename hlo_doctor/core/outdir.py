"""Output folders (``--out``): hlo-doctor replaces or writes into a folder only when it wrote it itself.

Every command that fills a folder (``profile``, ``doctor``, ``verify``) leaves :data:`MARKER` in it: a
small JSON file naming the command. A later run may replace such a folder; a folder without the
marker that holds anything at all is the user's, and the command stops (exit 2) before touching it.
A file name such as ``run.json`` is no proof: users keep files of that name, and one planted beside a
``src/`` folder must not get that folder deleted.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from hlo_doctor.core.errors import InputError

MARKER = ".hlo-doctor-output"
"""The marker file's name, in the top of every folder hlo-doctor writes."""

_WRITTEN_BY = "hlo-doctor"


def os_reason(exc: OSError) -> str:
    """Why a path could not be created or written, in words a user can act on."""
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        # mkdir(parents=True) below a regular file: "File exists" would name the wrong problem.
        return "a folder on its path is a file"
    return exc.strerror or str(exc)


def written_by(directory: Path) -> str | None:
    """The command that wrote ``directory`` (``profile``...), or None when its marker is missing or not
    hlo-doctor's (a link, a folder, something else in the file)."""
    marker = directory / MARKER
    try:
        if not stat.S_ISREG(os.lstat(marker).st_mode):
            return None
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("written_by") != _WRITTEN_BY or not isinstance(doc.get("command"), str):
        return None
    return str(doc["command"])


_WHAT = {"profile": "is not an hlo-doctor run directory", "doctor": "does not hold an earlier doctor run",
         "verify": "is not an hlo-doctor verify folder"}


def check_replaceable(out_dir: Path, command: str, *, option: str = "--out") -> None:
    """Refuse ``out_dir`` unless it is missing, empty, or an earlier output of ``command``.

    Raises:
        InputError: ``out_dir`` is a file, cannot be listed, holds the user's files, or is another
            command's output.
    """
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if not out_dir.is_dir():
        raise InputError(f"{option} {out_dir} exists and is not a folder", f"choose another {option} folder")
    try:
        empty = not any(out_dir.iterdir())
    except OSError as exc:
        raise InputError(f"{option} {out_dir}: cannot list it ({os_reason(exc)})",
                         f"choose another {option} folder") from None
    if empty:
        return
    wrote = written_by(out_dir)
    if wrote is None:
        raise InputError(f"{option} {out_dir} exists and {_WHAT.get(command, 'is not an hlo-doctor output folder')} "
                         f"(no {MARKER} in it: hlo-doctor did not write it)",
                         f"choose a new or empty {option} folder; hlo-doctor never replaces a folder it did not write")
    if wrote != command:
        raise InputError(f"{option} {out_dir} holds the output of 'hlo-doctor {wrote}', not of '{command}'",
                         f"choose another {option} folder")
    link = _first_link(out_dir)
    if link is not None:
        # hlo-doctor writes no links: one in a folder it wrote was planted, and a later write there
        # (report.md, a treatment folder) could go through it. Checked before anything is written.
        raise InputError(f"{option} {out_dir}: {link} is a symbolic link hlo-doctor did not write",
                         f"remove it, or choose a new {option} folder")


def _first_link(folder: Path) -> Path | None:
    """The first symbolic link (dangling or not) anywhere below ``folder``, links never followed."""
    stack = [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        return Path(entry.path)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
        except OSError:
            continue
    return None


def write_marker(directory: Path, command: str) -> None:
    """Mark ``directory`` as ``command``'s output (created exclusively: never through a planted link)."""
    text = json.dumps({"written_by": _WRITTEN_BY, "command": command}) + "\n"
    path = directory / MARKER
    try:
        if written_by(directory) == command:
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise InputError(f"{directory}: cannot write {MARKER} ({os_reason(exc)})",
                         "choose a writable output folder") from None


def claim(out_dir: Path, command: str, *, option: str = "--out") -> Path:
    """:func:`check_replaceable`, then create ``out_dir`` (and parents) and mark it; return it."""
    check_replaceable(out_dir, command, option=option)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {out_dir}: cannot create it ({os_reason(exc)})",
                         f"choose a writable {option} folder") from None
    write_marker(out_dir, command)
    return out_dir
