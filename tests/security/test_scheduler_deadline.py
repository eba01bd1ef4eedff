"""Threat: a ``--scheduler`` address that is not a Dask scheduler holds the command forever.

Three servers on 127.0.0.1, started by the test: one that accepts and never answers, one that answers
garbage, one that closes every connection at once. Each is exit 2 with one line naming the address,
within the documented 20 s (plus the command's start), and no traceback at exit.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from threats import REPO, cli

RUN = REPO / "sample_traces" / "engine_b64_original_a"


@pytest.fixture(params=["silent", "garbage", "closes"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    pytest.importorskip("distributed")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            if request.param == "garbage":
                try:
                    conn.sendall(b"\xff" * 64 + b"HTTP/1.1 200 OK\r\n\r\nnot dask" * 100)
                except OSError:
                    pass
                held.append(conn)
            elif request.param == "closes":
                conn.close()
            else:
                held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        sock.close()


def test_a_scheduler_that_is_not_one_is_exit_2_in_time(server: str) -> None:
    start = time.monotonic()
    r = cli("stats", str(RUN), "--scheduler", server, timeout=90)
    took = time.monotonic() - start
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and server in lines[0], r.stderr[-2000:]
    assert took < 20 + 15, took  # the documented 20 s, plus the interpreter's and jax's start
