"""XLA's HLO printer, run on a capture's module protos in a process of its own.

XLA's printer is native code; :func:`~hlo_doctor.hlo.proto.module_problem` checks the ids it trusts,
but a damage that check does not see could still crash it (SIGSEGV, an abort from a failed CHECK).
So the printing happens in one child process (``python -m hlo_doctor.hlo.printer_child``), started
at the first module and reused for every later one (the command pays one start, ~0.3 s of it
importing jaxlib, which the command's own process then never imports). Modules go one at a time
over a pipe: when the child dies, the module it was printing is the one that killed it, and
:class:`PrinterCrash` (an input error) names it, its host and its file. The next call starts a new
child.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from hlo_doctor.core.blas import reading_env
from hlo_doctor.core.errors import InputError

__all__ = ["PRINT_DEADLINE_S", "PrinterCrash", "print_modules", "warm"]

PRINT_DEADLINE_S = float(os.environ.get("HLO_DOCTOR_PRINT_DEADLINE_S", "300"))
"""How long the printer may take on one module before it counts as stuck (and is killed)."""

_HEAD = struct.Struct(">IQ")  # origin's length, proto's length (request); status, text's length (reply)
_REPLY = struct.Struct(">cQ")


class PrinterCrash(InputError):
    """XLA's printer died (or hung) on one module of a capture."""

    def __init__(self, what: str, hint: str, *, host: str, path: str) -> None:
        super().__init__(what, hint)
        self.host = host
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:  # across a worker's pipe or Dask
        return (_crash, (self.what, self.hint, self.host, self.path))


def _crash(what: str, hint: str, host: str, path: str) -> PrinterCrash:
    return PrinterCrash(what, hint, host=host, path=path)


class _Child:
    """One printer process and its pipes, owned by the process that started it."""

    def __init__(self) -> None:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        reading_env(env)  # it only prints: no BLAS threads (jaxlib imports numpy) beside the command's read
        self.owner = os.getpid()
        self.used = False
        self.proc = subprocess.Popen(  # noqa: S603 - this interpreter, a module of this package
            [sys.executable, "-m", "hlo_doctor.hlo.printer_child"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True)

    def print_one(self, proto: bytes, origin: str) -> str:
        """The module's text; :class:`InputError` for a module XLA refuses; ``_Died`` when the child died."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        name = origin.encode("utf-8", "replace")
        self.used = True
        try:
            self.proc.stdin.write(_HEAD.pack(len(name), len(proto)) + name)
            self.proc.stdin.write(proto)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _Died from None
        head = self._read(_REPLY.size)
        status, size = _REPLY.unpack(head)
        body = self._read(size).decode("utf-8", "replace")
        if status == b"T":
            return body
        what, _, hint = body.partition("\0")
        raise InputError(what, hint)

    def _read(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        chunks: list[bytes] = []
        while n:
            ready, _, _ = select.select([fd], [], [], PRINT_DEADLINE_S)
            if not ready:
                self.kill()
                raise _Died("hung")
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise _Died
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def how_it_died(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "stopped answering"
        if code < 0:
            try:
                return f"crashed ({signal.Signals(-code).name})"
            except ValueError:
                return f"crashed (signal {-code})"
        return f"exited ({code})"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if not self.used:  # started early and never needed (a command that stopped first): no wait
            self.kill()
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()


class _Died(Exception):
    pass


_LOCK = threading.Lock()
_child: _Child | None = None


def _get() -> _Child:
    global _child
    if _child is None or _child.owner != os.getpid() or _child.proc.poll() is not None:
        _child = _Child()
    return _child


def warm() -> None:
    """Start the printer now (its imports then overlap the reading of the capture)."""
    with _LOCK:
        _get()


def print_modules(items: Sequence[tuple[bytes, str, str, str]]) -> list[str | InputError]:
    """Each ``(proto, origin, host, path)``'s HLO text, or the :class:`InputError` saying why it has none.

    Raises:
        PrinterCrash: the printer died or hung on one of them (the next call starts a new one).
    """
    global _child
    out: list[str | InputError] = []
    with _LOCK:
        for proto, origin, host, path in items:
            child = _get()
            try:
                out.append(child.print_one(proto, origin))
            except InputError as exc:
                out.append(exc)
            except _Died as exc:
                how = "stopped answering" if exc.args == ("hung",) else child.how_it_died()
                _child = None
                where = f"{path}: " if path else ""
                raise PrinterCrash(
                    f"{where}XLA's HLO printer {how} on module {origin}" + (f" of host {host}" if host else ""),
                    "the capture is damaged: capture it again, or pass --skip-bad-hosts to leave this host out",
                    host=host, path=path) from None
    return out


@atexit.register
def _close() -> None:
    if _child is not None and _child.owner == os.getpid():
        _child.close()
