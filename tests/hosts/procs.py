"""The processes of a running command: which of them has a file open, to stop it mid-read."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path


def descendants(roots: Iterable[int]) -> set[int]:
    """The processes started by ``roots`` (children, grandchildren...), from /proc."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def readers(path: Path, among: Iterable[int]) -> list[int]:
    """The processes of ``among`` that have ``path`` open."""
    target = str(path.resolve())
    out = []
    for pid in among:
        try:
            if any(os.readlink(fd) == target for fd in Path(f"/proc/{pid}/fd").iterdir()):
                out.append(pid)
        except OSError:
            continue
    return out


def kill_reader(path: Path, roots: Iterable[int], *, not_pids: Iterable[int] = (), timeout_s: float = 120.0,
                sig: int = signal.SIGKILL) -> int:
    """Wait until a process started by ``roots`` (other than ``not_pids``) opens ``path``, send it
    ``sig`` (SIGKILL; SIGSTOP freezes it); its pid."""
    roots, skip = list(roots), set(not_pids)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [pid for pid in readers(path, descendants(roots)) if pid not in skip]
        if found:
            os.kill(found[0], sig)
            return found[0]
        time.sleep(0.01)
    raise AssertionError(f"no process opened {path} within {timeout_s} s")
