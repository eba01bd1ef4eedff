"""A local worker process: ``python -m hlo_doctor.hosts.worker``, started by :mod:`.local`.

It reads :class:`~hlo_doctor.hosts.work.HostTask` messages on stdin and answers each with a
:class:`~hlo_doctor.hosts.work.HostPart` or :class:`~hlo_doctor.hosts.work.HostFailure` on stdout,
until stdin closes or a ``None`` task arrives. A :class:`~hlo_doctor.hosts.work.FramePathsFile`
message names the file that holds the capture's frame paths, sent once the command has parsed the
modules; a task whose paths follow waits for it only when its host has Python frames to classify.
A message is a pickle behind its 8-byte length: both ends are this package, on one machine. Anything a library prints goes to stderr, never into
the answers.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import IO, Any

_HEADER = struct.Struct("<Q")


def send(stream: IO[bytes], message: object) -> None:
    """Write one message (a pickle behind its length) and flush it."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """Read one message; ``EOFError`` when the other end closed (or died) before a whole one came."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the stream closed")
    (size,) = _HEADER.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the stream closed inside a message")
    return pickle.loads(data)  # noqa: S301 - written by this package's own parent process


def main() -> None:
    """Serve tasks until stdin closes."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    # Whatever a library prints goes where people look, not into the answers.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # From the package, not this __main__: the classes the parent pickles.
    from hlo_doctor.hosts.work import FramePathsFile, read_one

    tasks = sys.stdin.buffer
    paths: tuple[tuple[str, str], ...] | None = None

    def later() -> tuple[tuple[str, str], ...]:
        # Mid-task: the next message is the paths (the parent sends no task before this one's answer).
        nonlocal paths
        while paths is None:
            message = receive(tasks)
            if not isinstance(message, FramePathsFile):
                raise EOFError(f"expected the frame paths, got {type(message).__name__}")
            paths = message.load()
        return paths

    while True:
        try:
            task = receive(tasks)
        except EOFError:
            return
        if task is None:
            return
        if isinstance(task, FramePathsFile):
            paths = task.load()
            continue
        send(answers, read_one(task, later))


if __name__ == "__main__":
    main()
