"""Headless Chromium driven over the DevTools protocol, with nothing but the standard library.

A page is opened in its own tab from ``file://``; the tab records every console message, uncaught
exception, log entry and network request while the page loads and draws. A screenshot is decoded
here (PNG, 8-bit RGB/RGBA as Chromium writes it) so tests can look at pixels.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--disable-default-apps", "--mute-audio", "--hide-scrollbars")


class WebSocket:
    """A blocking WebSocket client (RFC 6455): text messages, client frames masked."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the browser closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(head.decode(errors="replace"))

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("the browser closed the connection")
            buf += chunk
        return bytes(buf)

    def _frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            if opcode == 0x9:  # ping
                self._frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("the browser closed the connection")
            message += payload
            if b0 & 0x80:
                return message.decode()

    def close(self) -> None:
        try:
            self._frame(0x8, b"")
        finally:
            self.sock.close()


@dataclass
class PageLog:
    """What one tab saw while a page loaded and ran."""

    console: list[tuple[str, str]] = field(default_factory=list)
    """(type, text) of every console call."""
    exceptions: list[str] = field(default_factory=list)
    log: list[tuple[str, str]] = field(default_factory=list)
    """(level, text) of the browser's own log entries (CSP violations, failed loads)."""
    requests: list[str] = field(default_factory=list)
    """URL of every network request the page made (its own document included)."""

    @property
    def errors(self) -> list[str]:
        """Console errors, exceptions and error log entries."""
        return ([t for kind, t in self.console if kind in ("error", "assert")] + self.exceptions
                + [t for level, t in self.log if level == "error"])


class Browser:
    """One headless Chromium for a test session; :meth:`open` gives a fresh tab per page."""

    def __init__(self, executable: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="hlo-doctor-chromium-")
        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}",
                                      "--remote-debugging-port=0", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)  # its own process group: closed as one
        url = self._devtools_url(time.monotonic() + 60)
        self.ws = WebSocket(url)
        self._id = 0
        self._events: list[dict[str, Any]] = []

    def _devtools_url(self, deadline: float) -> str:
        assert self.proc.stderr is not None
        seen: list[str] = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                return m.group(1)
        raise RuntimeError("chromium did not start: " + "".join(seen[-10:]))

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        """Send one command and wait for its answer (events meanwhile are kept)."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self._events.append(reply)
        raise TimeoutError(method)

    def open(self, path: Path, *, dark: bool = False, width: int = 1200, height: int = 900,
             timeout: float = 30.0) -> Tab:
        """Open ``path`` from ``file://`` in a new tab and wait until its charts are drawn (or failed)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self, target, session, PageLog())
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(f"{domain}.enable", session=session)
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        features = [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]
        self.call("Emulation.setEmulatedMedia", {"features": features}, session=session)
        self._events.clear()
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                state = tab.evaluate("[document.readyState, document.documentElement.getAttribute('data-charts'),"
                                     " document.documentElement.getAttribute('data-charts-drawn'),"
                                     " document.documentElement.getAttribute('data-errors')]")
            except RuntimeError:  # between documents: no <html> element yet
                state = ["loading", None, None, None]
            if state[0] == "complete" and (state[3] or (state[1] is not None and state[1] == state[2])):
                break
            time.sleep(0.1)
        time.sleep(0.2)  # late console messages and requests
        self.call("Runtime.evaluate", {"expression": "1"}, session=session)
        tab.collect()
        return tab

    def close(self) -> None:
        try:
            self.ws.close()
        except OSError:
            pass
        # The browser's helpers (zygotes, GPU, renderers) are in the group this Browser started.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=10)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        shutil.rmtree(self.profile, ignore_errors=True)


@dataclass
class Tab:
    """One open page."""

    browser: Browser
    target: str
    session: str
    log: PageLog

    def collect(self) -> None:
        """Move the events of this tab seen so far into :attr:`log`."""
        keep = []
        for ev in self.browser._events:
            if ev.get("sessionId") != self.session:
                keep.append(ev)
                continue
            method, p = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                self.log.console.append((p.get("type", ""), text))
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                self.log.exceptions.append(str(d.get("exception", {}).get("description") or d.get("text")))
            elif method == "Log.entryAdded":
                e = p.get("entry", {})
                self.log.log.append((e.get("level", ""), f"{e.get('source')}: {e.get('text')} {e.get('url', '')}"))
            elif method == "Network.requestWillBeSent":
                self.log.requests.append(p.get("request", {}).get("url", ""))
        self.browser._events[:] = keep

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        r = self.browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in r:
            raise RuntimeError(str(r["exceptionDetails"]))
        return r.get("result", {}).get("value")

    def screenshot(self, clip: dict[str, float] | None = None, full_page: bool = False, scale: float = 1.0) -> bytes:
        """PNG bytes of the viewport, a clip of the page, or the whole page, ``scale`` pixels per CSS pixel."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": bool(full_page or clip)}
        if clip is not None:
            params["clip"] = {**clip, "scale": scale}
        elif full_page:
            w, h = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": h, "scale": scale}
        elif scale != 1.0:
            w, h = self.evaluate("[window.innerWidth, window.innerHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": h, "scale": scale}
        return base64.b64decode(self.browser.call("Page.captureScreenshot", params, session=self.session)["data"])

    def close(self) -> None:
        self.browser.call("Target.closeTarget", {"targetId": self.target})


def png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, ...]]]:
    """(width, height, RGB(A) tuples row by row) of an 8-bit, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and interlace == 0 and color in (2, 6), (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytearray] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(line)
        prev = line
    pixels = [tuple(r[x * channels:(x + 1) * channels]) for r in rows for x in range(width)]
    return width, height, pixels
