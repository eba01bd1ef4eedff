"""Output files written whole or not at all, with the mode a plain ``open()`` would give them.

A temporary file with an unpredictable name is created beside the destination (``mkstemp``: created
exclusively, so nothing planted at a guessed name is opened), filled, given the mode the process's
umask allows (``0o666 & ~umask``: ``0644`` under the usual ``022``, ``0600`` under ``077``) and
renamed over the destination. The rename replaces a link at the destination; it never writes
through one (docs/security.md).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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


def write_atomically(path: Path, data: str | bytes, *, hint: str = "choose a writable output path") -> None:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all, mode :func:`file_mode`.

    Raises:
        InputError: the folder cannot be created or written, or ``path`` is a folder; nothing is left
            behind. ``hint`` says what to do.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())
            f.write(raw)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write it ({os_reason(exc)})", hint) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
