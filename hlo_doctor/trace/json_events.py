"""Streaming a trace-viewer / Perfetto JSON file into per-thread event columns.

The files people share (jax's ``<host>.trace.json.gz`` and ``perfetto_trace.json.gz``, xprof's
``trace_viewer`` export) are the Chrome trace format: ``traceEvents`` (or a bare list of events),
``ph: "M"`` events naming processes (planes: ``/host:CPU``, ``/device:TPU:0``) and threads (lines:
``XLA Ops``, ``Stream #14(...)``), ``ph: "X"`` events with ``ts``/``dur`` in microseconds and
``args`` holding the event's stats as text.

``traceEvents`` is decoded a chunk of text at a time (every whole event in the chunk in one call,
by :mod:`.json_decode`: msgspec records holding only the keys read), so a 100 MB ``.json.gz`` never
becomes one Python object per event at once. Each thread's ``ph: "X"`` events become columns (name
and arg codes, times in ns); ``ph: "M"`` events name processes and threads.
Host events that are neither ops, steps, compiles nor dispatches (the Python tracer's frames, the
runtime's own spans) are dropped as they are read.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace.columns import Vocabulary
from hlo_doctor.trace.conventions import COMPILE_MARKERS
from hlo_doctor.trace.json_decode import GZIP_ERRORS, NONE, decode_events, decode_value, from_value, open_gzip

# Names as jax and xprof write them; any other ``.json.gz`` is read as a trace too.
TRACE_JSON_SUFFIXES = (".trace.json", ".trace.json.gz", "perfetto_trace.json", "perfetto_trace.json.gz")
HINT = "pass a trace-viewer JSON (<host>.trace.json.gz, perfetto_trace.json.gz, xprof's trace_viewer export)"
_CHUNK = 1 << 22  # bytes decoded per read: memory stays bounded on a 100 MB .json.gz
_SEP = re.compile(rb"[ \t\r\n,]*")
_WS = re.compile(rb"[ \t\r\n]*")
# Host events worth keeping (the Python tracer writes millions of others).
_HOST_KEEP = re.compile("|".join([*(re.escape(m) for m in COMPILE_MARKERS), r"^PjitFunction\("]))
INFO_KEYS = ("hlo_op", "hlo_module", "long_name", "program_id", "module")
"""The args kept per event, interned as one tuple (a few hundred distinct in millions of events)."""
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_WINDOW = 1 << 16  # bytes decoded to text for one value read on its own (grown while it runs past)
_NO_INFO = (None,) * len(INFO_KEYS)
_INF, _NAN = math.inf, math.nan
# xprof's derived lines: thread ids from trace_utils.h's kThreadIdDerivedMin, and the GPU lines it
# derives per stream ("XLA Modules - from #14").
_DERIVED_TID = 0xDEADBEEF
_FROM_STREAM = re.compile(r" - from #\d+$")


def is_device_plane(plane: str) -> bool:
    """A TPU/GPU plane (``/device:TPU:0``), as the xplane reader tells them."""
    return plane.startswith("/device:") and not plane.startswith("/device:CUSTOM")


def is_derived_line(tid: object, name: str) -> bool:
    """A line xprof derived from others (not in the xplane the profiler wrote)."""
    return (isinstance(tid, int) and tid >= _DERIVED_TID) or bool(_FROM_STREAM.search(name))


def is_trace_json(path: Path) -> bool:
    """Whether ``path`` is a trace JSON: by name, else (a plain ``.json``) by its first 64 KiB."""
    name = path.name
    if name.endswith((*TRACE_JSON_SUFFIXES, ".json.gz")):
        return True
    if not name.endswith(".json") or not path.is_file():
        return False
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return False
    # An hlo-doctor export names its schema first; a trace names traceEvents or is a bare list.
    return "hlo-doctor.opstats" not in head and ('"traceEvents"' in head or head.lstrip().startswith("["))


@dataclass(slots=True)
class EventLine:
    """One thread's events as columns (times in ns; NaN / ``NONE`` where an arg is absent)."""

    names: array = field(default_factory=lambda: array("i"))
    infos: array = field(default_factory=lambda: array("i"))
    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    run: array = field(default_factory=lambda: array("q"))
    dev_off: array = field(default_factory=lambda: array("d"))
    dev_dur: array = field(default_factory=lambda: array("d"))
    step: array = field(default_factory=lambda: array("q"))
    group: array = field(default_factory=lambda: array("q"))
    has_more: bool = False
    """Whether the four columns above are kept: only once an event of the line has one of them (a
    CPU or GPU line never does; they read as absent when empty)."""

    def start_more(self) -> None:
        """Keep the four columns from the event being added on (the events before it had none)."""
        n = len(self.names) - 1
        self.dev_off, self.dev_dur = array("d", [math.nan]) * n, array("d", [math.nan]) * n
        self.step, self.group = array("q", [NONE]) * n, array("q", [NONE]) * n
        self.has_more = True

    def more(self, off: float, ddur: float, step: int, group: int) -> None:
        """Append the device-clock and step columns of the event just added."""
        if not self.has_more:
            self.start_more()
        self.dev_off.append(off)
        self.dev_dur.append(ddur)
        self.step.append(step)
        self.group.append(group)

    def column(self, name: str) -> np.ndarray:
        """``dev_off``, ``dev_dur`` (NaN when absent or not finite), ``step`` or ``group``
        (:data:`NONE`), one per event."""
        if not self.has_more:
            return np.full(len(self.names), math.nan if name.startswith("dev") else NONE)
        if name.startswith("dev"):
            values = np.frombuffer(getattr(self, name), np.float64)
            return np.where(np.isfinite(values), values, math.nan)
        return np.frombuffer(getattr(self, name), np.int64)

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and durations (ns), on the device clock where the args give it.

        ``device_offset_ps`` counts from the line's start on the device clock, which the file does
        not give: the line is placed at the median of ``ts - device_offset`` over its events (one
        constant per line, so spacing and nesting are the device's own).
        """
        ts, dur = np.frombuffer(self.ts, np.float64), np.frombuffer(self.dur, np.float64)
        off, ddur = self.column("dev_off"), self.column("dev_dur")
        has_off = ~np.isnan(off)
        if has_off.any():
            ts = ts.copy()
            ts[has_off] = float(np.median(ts[has_off] - off[has_off] / 1e3)) + off[has_off] / 1e3
        has_dur = ~np.isnan(ddur)
        return ts, (np.where(has_dur, ddur / 1e3, dur) if has_dur.any() else dur)


class EventFile:
    """The events of one trace JSON, streamed: ``traceEvents`` is decoded one event at a time."""

    def __init__(self, path: Path) -> None:
        self.path, self.origin = path, str(path)
        self.processes: dict[Any, str] = {}
        self.threads: dict[tuple[Any, Any], str] = {}
        self.lines: dict[tuple[Any, Any], EventLine] = {}
        self.names, self.infos = Vocabulary(), Vocabulary()
        self.infos.code(None)  # code 0: no args worth keeping
        self._info_codes: dict[tuple[Any, ...], int] = {}
        self._host_keep: dict[str, bool] = {}  # host event name -> kept (a few thousand distinct)
        self.host_pids: set[Any] = set()
        self._last: tuple[Any, Any, EventLine] = (object(), object(), EventLine())  # the line last added to
        self.bad_times = self.bad_events = 0
        self.found = False

    @property
    def host(self) -> str:
        """The host the file speaks for: ``vm`` for ``vm.trace.json.gz``; jax's perfetto file names none."""
        name = self.path.name
        for suffix in (".trace.json.gz", ".trace.json", ".json.gz", ".json"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        return "" if name == "perfetto_trace" else name

    def _bad(self, what: str) -> InputError:
        return InputError(f"{self.origin}: {what}", HINT)

    def read(self) -> EventFile:
        try:
            with self.path.open("rb") as raw:
                gz = raw.read(2) == b"\x1f\x8b"
            fh: BinaryIO = open_gzip(self.path) if gz else self.path.open("rb")
            with fh:
                self._parse(fh)
        except GZIP_ERRORS as exc:
            raise InputError(f"{self.origin}: truncated or corrupt gzip ({exc})",
                             "the file is cut short or damaged: export or download it again") from exc
        except UnicodeDecodeError as exc:
            raise self._bad(f"not UTF-8 text ({exc.reason})") from exc
        except OSError as exc:
            raise InputError(f"{self.origin}: cannot read ({exc.strerror or exc})", "check the path") from exc
        if not self.found:
            raise self._bad("not a trace: no traceEvents")
        return self

    # -- streaming JSON --------------------------------------------------------------------------

    def _parse(self, fh: BinaryIO) -> None:
        # The text stays UTF-8 bytes: msgspec decodes them as they are (decoding them to str first
        # costs as much as inflating them); only a value read on its own becomes text.
        self.fh, self.buf, self.pos, self.eof = fh, b"", 0, False
        self._more()
        self._skip(_WS)
        if self.pos >= len(self.buf):
            raise self._bad("empty file")
        if self.buf.startswith(b"[", self.pos):
            self.pos += 1
            self.found = True
            self._events()
        elif self.buf.startswith(b"{", self.pos):
            self.pos += 1
            self._object()
        else:
            raise self._bad("not a trace: neither a JSON object with traceEvents nor a list of events")

    def _more(self, at_least: int = 0) -> bool:
        """Append the next chunk (at least ``at_least`` bytes: a value longer than a chunk)."""
        if self.eof:
            return False
        data = self.fh.read(max(_CHUNK, at_least))
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + data
        self.pos = 0
        return True

    def _skip(self, pattern: re.Pattern[bytes]) -> None:
        while True:
            self.pos = pattern.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or not self._more():
                return

    def _value(self) -> Any:
        """The next JSON value, by the stdlib (a window of the buffer decoded to text, grown, and
        more of the file read, while the value runs past it)."""
        size = _WINDOW
        while True:
            try:
                value, self.pos = decode_value(self.buf, self.pos, size, eof=self.eof)
                return value
            except json.JSONDecodeError as exc:
                if self.pos + size < len(self.buf):
                    size *= 4
                elif not self._more(len(self.buf) - self.pos):
                    raise self._bad(f"not valid JSON ({exc.msg}): truncated or corrupt") from exc
            except RecursionError:
                raise self._bad("JSON nested too deeply") from None

    def _object(self) -> None:
        """The top-level object: ``traceEvents`` is streamed, other keys decoded and dropped."""
        while True:
            self._skip(_SEP)
            if self.pos >= len(self.buf):
                raise self._bad("not valid JSON: the top-level object is cut off (truncated)")
            if self.buf.startswith(b"}", self.pos):
                return
            key = self._value()
            self._skip(_WS)
            if not self.buf.startswith(b":", self.pos):
                raise self._bad(f"not valid JSON: no ':' after key {key!r}")
            self.pos += 1
            self._skip(_WS)
            if key == "traceEvents":
                if not self.buf.startswith(b"[", self.pos):
                    raise self._bad("traceEvents is not a list of events")
                self.pos += 1
                self.found = True
                self._events()
            else:
                self._value()

    def _events(self) -> None:
        no_batch_until = -1
        while True:
            self._skip(_SEP)
            if self.pos >= len(self.buf):
                raise self._bad("not valid JSON: traceEvents is cut off (truncated)")
            if self.buf.startswith(b"]", self.pos):
                self.pos += 1
                return
            # Every whole event in the buffer at once (one C call): up to the last "}, {" between
            # two events. A cut inside a string or a nested list leaves unbalanced JSON, never other
            # events: the batch fails and the events are read one at a time past that point.
            batch: list[Any] | None = None
            cut = self._last_boundary() if self.pos > no_batch_until else -1
            if cut > self.pos:
                try:
                    batch = decode_events(b"[" + self.buf[self.pos:cut + 1] + b"]")
                    self.pos = cut + 1
                except (ValueError, RecursionError):
                    no_batch_until = cut
            if batch is None:
                if cut <= self.pos and self.pos > no_batch_until and self._more():
                    continue  # the one event left is cut off by the chunk's end: read on first
                batch = [from_value(self._value())]
            self._add(batch)

    def _last_boundary(self) -> int:
        """Index of the ``}`` of the last ``}, {`` in the buffer after ``pos``; -1 if none."""
        buf, end = self.buf, len(self.buf)
        while (i := buf.rfind(b"}", self.pos, end)) >= 0:
            if _BOUNDARY.match(buf, i):
                return i
            end = i
        return -1

    # -- events ----------------------------------------------------------------------------------

    def _m(self, ev: Any) -> None:
        args = ev.args
        name = args.name if args is not None else None
        if not isinstance(name, str):
            return
        if ev.name == "process_name":
            self.processes[ev.pid] = name
            if "/host:" in name:
                self.host_pids.add(ev.pid)
        elif ev.name == "thread_name":
            self.threads[(ev.pid, ev.tid)] = name

    def _info(self, key: tuple[Any, ...]) -> int:
        """The code of an event's kept args (as text: some writers put numbers)."""
        try:
            code = self._info_codes.get(key)
        except TypeError:  # a list or an object as a value
            code, key = None, tuple(None if v is None else str(v) for v in key)
        if code is None:
            code = self._info_codes[key] = self.infos.code(tuple(None if v is None else str(v) for v in key))
        return code

    def _add(self, events: list[Any]) -> None:
        """Add a batch of decoded events (:mod:`.json_decode` records; None: not an object)."""
        # The hot loop of a large trace: one pass per event, no helper calls on the common path.
        info_codes, host_pids, host_keep, lines = self._info_codes, self.host_pids, self._host_keep, self.lines
        name_codes = self.names.codes
        last_pid, last_tid, line = self._last
        for ev in events:
            if ev is None:
                self.bad_events += 1
                continue
            ph = ev.ph
            if ph != "X":
                if ph == "M":
                    self._m(ev)
                continue
            pid = ev.pid
            name = ev.name
            if type(name) is not str:
                name = str(name or "")
            args = ev.args
            info, step_arg = 0, None
            if args is not None:
                key = (args.hlo_op, args.hlo_module, args.long_name, args.program_id, args.module)
                if key != _NO_INFO:
                    try:
                        info = info_codes[key]
                    except (KeyError, TypeError):
                        info = self._info(key)
                step_arg = args.step_num
            # The Python tracer and runtime write most host events: only ops, steps, compiles and
            # dispatches are kept (an event of a process named later is kept and sorted out at the end).
            on_host = pid in host_pids
            if not info and step_arg is None and on_host:
                keep = host_keep.get(name)
                if keep is None:
                    keep = host_keep[name] = bool(_HOST_KEEP.search(name))
                if not keep:
                    continue
            ts: Any = ev.ts
            dur: Any = ev.dur
            tt, td = type(ts), type(dur)
            if (tt is not float and tt is not int) or (td is not float and td is not int) \
                    or not -_INF < ts < _INF or not 0 <= dur < _INF:
                self.bad_times += 1
                continue
            tid = ev.tid
            if pid != last_pid or tid != last_tid:
                found = lines.get((pid, tid))
                line = found if found is not None else lines.setdefault((pid, tid), EventLine())
                last_pid, last_tid = pid, tid
            code = name_codes.get(name)
            line.names.append(code if code is not None else self.names.code(name))
            line.infos.append(info)
            line.ts.append(ts * 1e3)
            line.dur.append(dur * 1e3)
            run = -1
            if args is not None:
                # Numbers already (json_decode): None where the event has no such arg.
                if (v := args.run_id) is not None:
                    run = v
                off, ddur = args.device_offset_ps, args.device_duration_ps
                # group_id names a device step; on the host xprof puts it on nearly every event.
                group = None if on_host else args.group_id
                if off is not None or ddur is not None or step_arg is not None or group is not None:
                    if not line.has_more:
                        line.start_more()
                    line.dev_off.append(_NAN if off is None else off)
                    line.dev_dur.append(_NAN if ddur is None else ddur)
                    line.step.append(NONE if step_arg is None else step_arg)
                    line.group.append(NONE if group is None else group)
                elif line.has_more:
                    line.more(_NAN, _NAN, NONE, NONE)
            elif line.has_more:
                line.more(_NAN, _NAN, NONE, NONE)
            line.run.append(run)
        self._last = (last_pid, last_tid, line)
