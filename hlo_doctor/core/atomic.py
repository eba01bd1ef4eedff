"""Output files written whole or not at all, with the mode a plain ``open()`` would give them.

A temporary file with an unpredictable name is created beside the destination (random, created
exclusively, so nothing planted at a guessed name is opened), filled, given the mode the process's
umask allows (``0o666 & ~umask``: ``0644`` under the usual ``022``, ``0600`` under ``077``) and
renamed over the destination. The rename replaces a link at the destination; it never writes
through one (docs/security.md).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import threading
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.outdir import os_reason

__all__ = ["file_mode", "write_atomically"]

_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process's umask: read from ``/proc/self/status`` where Linux says it (reading it changes
    nothing), else set and put back at once (under a lock; the brief mask set is the stricter 077)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets from ``open(path, "w")`` in this process: ``0o666`` less the umask."""
    return 0o666 & ~_umask()


def write_atomically(path: Path, data: str | bytes, *, hint: str = "choose a writable output path",
                     folder_no_link: bool = False) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all, mode :func:`file_mode`.

    The folder is opened once and every later step is relative to that open folder: a link planted
    at the folder's path after it was opened (or after a caller checked it) changes nothing, a link
    at the temporary name is never opened (``O_EXCL | O_NOFOLLOW``), one at ``path`` is replaced by
    the rename. ``folder_no_link``: the folder itself (a folder hlo-doctor made, such as a report's
    chart images) must not be a link when it is opened.

    Raises:
        InputError: the folder cannot be created or written, is a link with ``folder_no_link``, or
            ``path`` is a folder; nothing is left behind. ``hint`` says what to do.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp: str | None = None
    folder = -1
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
        try:
            folder = os.open(path.parent, flags | (os.O_NOFOLLOW if folder_no_link else 0))
        except OSError as exc:
            if folder_no_link and exc.errno in (errno.ELOOP, errno.ENOTDIR) and path.parent.is_symlink():
                raise InputError(f"{path.parent}: a symbolic link where hlo-doctor writes {path.name}; "
                                 "nothing was written there", "remove the link") from None
            raise
        for _ in range(16):
            name = f".{path.name}.{secrets.token_hex(8)}.tmp"
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                             0o600, dir_fd=folder)
            except FileExistsError:
                continue
            tmp = name
            break
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name")
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())
            f.write(raw)
        os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        tmp = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write it ({os_reason(exc)})", hint) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
        if folder >= 0:
            os.close(folder)
