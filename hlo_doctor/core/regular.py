"""Capture files are opened only when they are regular files.

A FIFO planted as ``<host>.xplane.pb`` (or a device, a socket) blocks ``open()`` or ``read()`` forever:
every capture is opened with ``O_NONBLOCK`` (so opening a FIFO returns at once), checked with
``fstat`` on the descriptor it will read (no race with a swap after the check), then read blocking.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from hlo_doctor.core.errors import InputError

__all__ = ["open_regular", "read_regular_bytes"]


def open_regular(path: Path | str, hint: str = "pass a capture file (a regular file)") -> BinaryIO:
    """``path`` opened for binary reading.

    Raises:
        InputError: it cannot be opened, or it is not a regular file (a FIFO, a device, a socket, a folder).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})", "check the path and permissions") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise InputError(f"{path}: {kind}, not a capture file (read as one it would block or fail)", hint)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: Path | str) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`)."""
    with open_regular(path) as f:
        try:
            return f.read()
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror or exc})", "check the path and permissions") from exc
