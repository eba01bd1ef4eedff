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
from pathlib import Path
from typing import Any, BinaryIO

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.regular import open_regular
from hlo_doctor.trace.columns import Vocabulary
from hlo_doctor.trace.conventions import COMPILE_MARKERS, EXECUTE_MARKER
from hlo_doctor.trace.json_decode import (
    GZIP_ERRORS,
    NONE,
    decode_events,
    decode_sources,
    decode_value,
    from_value,
    open_gzip,
)
from hlo_doctor.trace.json_line import EventLine

HINT = "pass a trace-viewer JSON (<host>.trace.json.gz, perfetto_trace.json.gz, xprof's trace_viewer export)"
_CHUNK = 1 << 22  # bytes decoded per read: memory stays bounded on a 100 MB .json.gz
_SEP = re.compile(rb"[ \t\r\n,]*")
_WS = re.compile(rb"[ \t\r\n]*")
# Host events worth keeping (the runtime writes millions of others): as python_frames keeps them on
# an xplane; a frame of a .py file is ``$file.py:12 function`` (line > 0; C functions are line-less).
_HOST_KEEP = re.compile("|".join([*(re.escape(m) for m in COMPILE_MARKERS), r"^PjitFunction\(",
                                  re.escape(EXECUTE_MARKER), r"^\$(?!<)\S*:\d*[1-9]\d*(?:\s|$)"]))
INFO_KEYS = ("hlo_op", "hlo_module", "long_name", "program_id", "module")
"""The args kept per event, interned as one tuple (a few hundred distinct in millions of events); an
op's ``source`` and ``source_stack`` are kept once per tuple (:attr:`EventFile.sources`)."""
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_WINDOW = 1 << 16  # bytes decoded to text for one value read on its own (grown while it runs past)
MAX_EVENT_BYTES = 64 << 20
"""The longest event (or other value) a trace JSON may hold. Real events are a few hundred bytes (an op's
whole Python stack: a few KiB); a longer one is an input error, so that one event with a 4 GiB name in
a small ``.json.gz`` is refused after reading 64 MiB of it instead of filling the memory (and each
search for the next event's start scans at most this much)."""
_NO_INFO = (None,) * len(INFO_KEYS)
_INF, _NAN = math.inf, math.nan
_UNREAD = object()


def _stack_text(stack: Any) -> str:
    """A ``source_stack`` as ``file:line`` lines (a writer may put a list of frames)."""
    return "\n".join(map(str, stack)) if isinstance(stack, list) else str(stack)


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
        self.sources: dict[int, tuple[str | None, str | None]] = {}
        """Args code -> ``source`` and ``source_stack`` of the first op event of that code: the JSON
        has no program id on op events, so an op whose HLO text two programs share has one line."""
        self._want: dict[int, int] = {}  # id(event) -> code: events of the batch being read whose op
        # was met first, their source args not read yet

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

    def _too_long(self) -> InputError:
        return self._bad(f"an event or value longer than {MAX_EVENT_BYTES >> 20} MiB (real events are a few "
                         "KiB): not a trace this tool reads")

    def read(self) -> EventFile:
        try:
            raw = open_regular(self.path, HINT)  # a FIFO planted as a trace would block forever
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            fh: BinaryIO = open_gzip(raw) if gz else raw
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
            if size > 4 * MAX_EVENT_BYTES or len(self.buf) - self.pos > MAX_EVENT_BYTES + _CHUNK:
                raise self._too_long()
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
            cut, start = (self._last_boundary() if self.pos > no_batch_until else -1), self.pos
            if cut > self.pos:
                try:
                    batch = self._batch(start, cut, decode_events)
                    self.pos = cut + 1
                except (ValueError, RecursionError):
                    no_batch_until = cut
            if batch is None:
                if cut <= self.pos and len(self.buf) - self.pos > MAX_EVENT_BYTES:
                    raise self._too_long()
                if cut <= self.pos and self.pos > no_batch_until and self._more():
                    continue  # the one event left is cut off by the chunk's end: read on first
                batch = [from_value(self._value())]
            self._add(batch)
            if self._want:  # ops met first in this batch: their source args, from the batch decoded again
                self._sources(batch, self._batch(start, cut, decode_sources))

    def _batch(self, pos: int, cut: int, decode: Any) -> list[Any]:
        """The events from ``pos`` to ``cut`` decoded in place: the separators either side (``pos``
        is past ``[`` or ``,``; ``cut + 1`` is before ``,``) become ``[`` and ``]`` while it runs."""
        buf, start = self.buf, pos - 1
        before, after = buf[start], buf[cut + 1]
        buf[start], buf[cut + 1] = 0x5B, 0x5D
        try:
            with memoryview(buf) as view:
                return decode(view[start:cut + 2])  # type: ignore[no-any-return]
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

    def _source_of(self, info: int, ev: Any) -> None:
        """The source args of an op met first: from its record where it has them (the stdlib's),
        else read with its batch again (:meth:`_sources`)."""
        args = ev.args
        if not hasattr(args, "source"):
            self._want[id(ev)] = info
        elif args.source is not None or args.source_stack is not None:
            self._keep_source(info, (args.source, args.source_stack))

    def _sources(self, events: list[Any], found: list[tuple[Any, Any] | None]) -> None:
        """Keep the source args :meth:`_source_of` wants (``found``: one per entry of ``events``)."""
        want = self._want
        for ev, pair in zip(events, found, strict=True):
            if pair is not None and (code := want.get(id(ev))) is not None:
                self._keep_source(code, pair)
        want.clear()

    def _keep_source(self, code: int, pair: tuple[Any, Any]) -> None:
        source, stack = pair
        if code not in self.sources:
            self.sources[code] = (None if source is None else str(source), None if stack is None else _stack_text(stack))

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
                    self._source_of(info, ev)
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
