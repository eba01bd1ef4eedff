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
Host events that are neither ops, steps, compiles, dispatches, the PJRT client's execution of a
program nor the Python tracer's frames of ``.py`` files (the runtime's own spans, C functions) are
dropped as they are read: what is kept is what :mod:`.json_threads` makes the host threads of.
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
from hlo_doctor.trace.conventions import COMPILE_MARKERS, EXECUTE_MARKER
from hlo_doctor.trace.json_decode import GZIP_ERRORS, NONE, decode_events, decode_value, from_value, open_gzip

HINT = "pass a trace-viewer JSON (<host>.trace.json.gz, perfetto_trace.json.gz, xprof's trace_viewer export)"
_CHUNK = 1 << 22  # bytes decoded per read: memory stays bounded on a 100 MB .json.gz
_SEP = re.compile(rb"[ \t\r\n,]*")
_WS = re.compile(rb"[ \t\r\n]*")
# Host events worth keeping (the runtime writes millions of others): as python_frames keeps them on
# an xplane; a frame of a .py file is ``$file.py:12 function`` (line > 0; C functions are line-less).
_HOST_KEEP = re.compile("|".join([*(re.escape(m) for m in COMPILE_MARKERS), r"^PjitFunction\(",
                                  re.escape(EXECUTE_MARKER), r"^\$(?!<)\S*:\d*[1-9]\d*(?:\s|$)"]))
INFO_KEYS = ("hlo_op", "hlo_module", "long_name", "program_id", "module")
"""The args kept per event, interned as one tuple (a few hundred distinct in millions of events)."""
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_WINDOW = 1 << 16  # bytes decoded to text for one value read on its own (grown while it runs past)
_NO_INFO = (None,) * len(INFO_KEYS)
_INF, _NAN = math.inf, math.nan
@dataclass(slots=True)
class EventLine:
    """One thread's events as columns (times in ns; NaN / ``NONE`` where an arg is absent).

    Stored interleaved: :attr:`floats` holds (ts, dur, device offset, device duration) per event,
    :attr:`ints` (name code, args code, run id, step, group). The reader's hot loop extends the
    lists :attr:`pending_floats` / :attr:`pending_ints` (one ``list.extend`` per event and kind, about
    a third of an array's per-item extend) and :meth:`flush` moves them into the arrays once a batch.
    """

    floats: array = field(default_factory=lambda: array("d"))
    ints: array = field(default_factory=lambda: array("q"))
    pending_floats: list[float] = field(default_factory=list)
    pending_ints: list[int] = field(default_factory=list)

    def flush(self) -> None:
        """Move the pending values into the arrays (after each batch: memory stays bounded)."""
        if self.pending_floats:
            start = len(self.floats)
            self.floats.fromlist(self.pending_floats)
            with np.errstate(over="ignore"):  # ts and dur come in µs: to ns a batch at once, as ``x * 1e3``
                np.frombuffer(self.floats, np.float64)[start:].reshape(-1, 4)[:, :2] *= 1e3
        self.ints.fromlist(self.pending_ints)
        self.pending_floats.clear()
        self.pending_ints.clear()

    def _floats(self) -> np.ndarray:
        return np.frombuffer(self.floats, np.float64).reshape(-1, 4)

    def _ints(self) -> np.ndarray:
        return np.frombuffer(self.ints, np.int64).reshape(-1, 5)

    def __len__(self) -> int:
        return len(self.ints) // 5

    @property
    def names(self) -> np.ndarray:
        """Name codes (:attr:`EventFile.names`)."""
        return self._ints()[:, 0]

    @property
    def infos(self) -> np.ndarray:
        """Args codes (:attr:`EventFile.infos`; 0: no args kept)."""
        return self._ints()[:, 1]

    @property
    def run(self) -> np.ndarray:
        """``run_id`` (-1 when absent)."""
        return self._ints()[:, 2]

    @property
    def ts(self) -> np.ndarray:
        """``ts`` in ns (host clock)."""
        return self._floats()[:, 0]

    @property
    def dur(self) -> np.ndarray:
        """``dur`` in ns."""
        return self._floats()[:, 1]

    def column(self, name: str) -> np.ndarray:
        """``dev_off``, ``dev_dur`` (NaN when absent or not finite), ``step`` or ``group``
        (:data:`NONE`), one per event."""
        if name.startswith("dev"):
            values = self._floats()[:, 2 if name == "dev_off" else 3]
            return np.where(np.isfinite(values), values, math.nan)
        return self._ints()[:, 3 if name == "step" else 4]

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and durations (ns), on the device clock where the args give it.

        ``device_offset_ps`` counts from the line's start on the device clock, which the file does
        not give: the line is placed at the median of ``ts - device_offset`` over its events (one
        constant per line, so spacing and nesting are the device's own).
        """
        ts, dur = self.ts, self.dur
        off, ddur = self.column("dev_off"), self.column("dev_dur")
        has_off = ~np.isnan(off)
        if has_off.any():
            ts = ts.copy()
            ts[has_off] = float(np.median(ts[has_off] - off[has_off] / 1e3)) + off[has_off] / 1e3
        has_dur = ~np.isnan(ddur)
        return ts, (np.where(has_dur, ddur / 1e3, dur) if has_dur.any() else dur)


class EventFile:
    """The events of one trace JSON, streamed: ``traceEvents`` is decoded a chunk of events at a time."""

    def __init__(self, path: Path) -> None:
        self.path, self.origin = path, str(path)
        self.processes: dict[Any, str] = {}
        self.threads: dict[tuple[Any, Any], str] = {}
        self.lines: dict[tuple[Any, Any], EventLine] = {}
        self.names, self.infos = Vocabulary(), Vocabulary()
        self.infos.code(None)  # code 0: no args worth keeping
        self._info_codes: dict[tuple[Any, ...], int] = {_NO_INFO: 0}
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
        self.fh, self.buf, self.pos, self.eof = fh, bytearray(), 0, False
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
        # A bytearray drops its read part in place and appends: the chunk is copied once. The byte
        # before ``pos`` stays (a batch borrows it for its ``[``: :meth:`_events`).
        del self.buf[:max(self.pos - 1, 0)]
        self.buf += data
        self.pos = min(self.pos, 1)
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
                    batch = self._batch(cut)
                    self.pos = cut + 1
                except (ValueError, RecursionError):
                    no_batch_until = cut
            if batch is None:
                if cut <= self.pos and self.pos > no_batch_until and self._more():
                    continue  # the one event left is cut off by the chunk's end: read on first
                batch = [from_value(self._value())]
            self._add(batch)

    def _batch(self, cut: int) -> list[Any]:
        """The events from ``pos`` to ``cut`` decoded in place: the separators either side (``pos``
        is past ``[`` or ``,``; ``cut + 1`` is before ``,``) become ``[`` and ``]`` while it runs."""
        buf, start = self.buf, self.pos - 1
        before, after = buf[start], buf[cut + 1]
        buf[start], buf[cut + 1] = 0x5B, 0x5D
        try:
            with memoryview(buf) as view:
                return decode_events(view[start:cut + 2])
        finally:
            buf[start], buf[cut + 1] = before, after

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
        floats, ints = line.pending_floats.extend, line.pending_ints.extend
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
                try:
                    info = info_codes[key]  # _NO_INFO is code 0
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
                last_pid, last_tid, floats, ints = pid, tid, line.pending_floats.extend, line.pending_ints.extend
            code = name_codes.get(name)
            if code is None:
                code = self.names.code(name)
            if args is None:
                floats((ts, dur, _NAN, _NAN))
                ints((code, info, -1, NONE, NONE))
                continue
            # Numbers already (json_decode): None where the event has no such arg. group_id names a
            # device step; on the host xprof puts it on nearly every event.
            off, ddur, run, group = args.device_offset_ps, args.device_duration_ps, args.run_id, args.group_id
            floats((ts, dur, _NAN if off is None else off, _NAN if ddur is None else ddur))
            ints((code, info, -1 if run is None else run, NONE if step_arg is None else step_arg,
                  NONE if group is None or on_host else group))
        self._last = (last_pid, last_tid, line)
        for added in lines.values():
            added.flush()
