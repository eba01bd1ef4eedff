"""File operations inside a fix target that cannot be steered by what is already in the target.

Every path below the target root is reached one component at a time from an open directory
(``openat``-style ``dir_fd`` calls) with ``O_NOFOLLOW``: a symbolic link anywhere below the root (a
planted ``.hlo-doctor``, a linked package folder, a linked source file) stops the command with an
:class:`InputError` instead of being followed. Temporary files get unpredictable names and are
created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so nothing planted at a guessed name is ever opened.
The root itself is the folder the user named (resolved once by target detection).

One command at a time per target: :func:`target_lock` holds an exclusive ``flock`` on the root folder
itself (no lock file, so nothing is left behind and nothing can be planted in its place).
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hlo_doctor.core.errors import InputError

TMP_SUFFIX = ".hlo-doctor-tmp"
# How long a second apply-fix or revert on the same target waits for the first one (seconds;
# HLO_DOCTOR_LOCK_WAIT_S overrides it).
LOCK_WAIT_S = 60.0
LOCK_WAIT_ENV = "HLO_DOCTOR_LOCK_WAIT_S"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _symlink_error(path: Path) -> InputError:
    return InputError(
        f"{path} is a symbolic link (or not a regular file or folder) inside the target",
        "hlo-doctor never writes through links in a target: replace it with the real file or folder; nothing was changed",
    )


class Dir:
    """An open folder below a target root, reached without following any symbolic link."""

    def __init__(self, fd: int, path: Path, created: tuple[Path, ...] = ()) -> None:
        self.fd = fd
        self.path = path
        # The folders this open created (outermost first), for a clean-up that leaves no trace.
        self.created = created

    def close(self) -> None:
        """Close the folder's descriptor."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------------------------

    def lstat(self, name: str) -> os.stat_result | None:
        """``lstat`` of ``name`` in this folder, or None when there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read(self, name: str) -> bytes:
        """The bytes of the regular file ``name``; a link or a non-file is an :class:`InputError`."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise _symlink_error(self.path / name) from exc
            raise
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise _symlink_error(self.path / name)
            return handle.read()

    # -- writing -------------------------------------------------------------------------------

    def write_temp(self, hint: str, data: bytes, mode: int) -> str:
        """A new file holding ``data`` (fsynced, ``mode``) under an unpredictable name; its name."""
        name = f".{hint[:64]}.{secrets.token_hex(8)}{TMP_SUFFIX}"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, stat.S_IMODE(mode))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self.unlink(name)
            raise
        os.close(fd)
        return name

    def replace(self, src: str, dst: str) -> None:
        """Rename ``src`` over ``dst`` (both in this folder; atomic)."""
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def write_atomic(self, name: str, data: bytes, mode: int = 0o644) -> None:
        """Replace ``name`` with ``data`` in one rename, then make the rename durable."""
        tmp = self.write_temp(name, data, mode)
        try:
            self.replace(tmp, name)
        except BaseException:
            self.unlink(tmp)
            raise
        self.sync()

    def unlink(self, name: str) -> None:
        """Remove the file ``name`` (never a folder) when it is there."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def sync(self) -> None:
        """Make the renames in this folder durable."""
        try:
            os.fsync(self.fd)
        except OSError:
            pass  # some filesystems refuse fsync on a folder; the rename itself is still atomic


def open_dir(root: Path, parts: Sequence[str], *, create: bool = False) -> Dir:
    """The folder ``root/parts...`` reached without following links (created when ``create``).

    Raises :class:`InputError` when a component is a link or not a folder, ``FileNotFoundError`` when
    a component is missing and ``create`` is false.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    path = root
    created: list[Path] = []
    try:
        for part in parts:
            if part in ("", ".", "..") or "/" in part or "\0" in part:
                raise InputError(f"{path / part} is not a path inside the target", "nothing was changed")
            path = path / part
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                created.append(path)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise _symlink_error(path) from exc
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        remove_empty(root, created)
        raise
    return Dir(fd, path, tuple(created))


def open_parent(root: Path, rel: str, *, create: bool = False) -> tuple[Dir, str]:
    """The folder holding ``root/rel`` and the file's name in it."""
    parts = rel.split("/")
    return open_dir(root, parts[:-1], create=create), parts[-1]


def remove_empty(root: Path, folders: Sequence[Path]) -> None:
    """Remove ``folders`` (innermost last in the sequence) when empty; never follows links."""
    for folder in reversed(folders):
        try:
            rel = folder.relative_to(root).parts
        except ValueError:
            continue
        if not rel:
            continue
        try:
            with open_dir(root, rel[:-1]) as parent:
                os.rmdir(rel[-1], dir_fd=parent.fd)
        except (OSError, InputError):
            return


@contextmanager
def target_lock(root: Path, wait_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``root`` (the folder itself) for one apply or revert.

    A second command on the same target waits up to ``wait_s`` seconds, then stops with an
    :class:`InputError`. The lock goes with the process: a killed command never leaves it held.
    """
    if wait_s is None:
        try:
            wait_s = max(0.0, float(os.environ.get(LOCK_WAIT_ENV, LOCK_WAIT_S)))
        except ValueError:
            wait_s = LOCK_WAIT_S
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InputError(
                        f"{root} is locked by another hlo-doctor apply-fix or --revert (waited {wait_s:.0f} s)",
                        "run again when it has finished; nothing was changed",
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock
