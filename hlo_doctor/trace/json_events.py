"""Streaming a trace-viewer / Perfetto JSON file into per-thread event columns.

The files people share (jax's ``<host>.trace.json.gz`` and ``perfetto_trace.json.gz``, xprof's
``trace_viewer`` export) are the Chrome trace format: ``traceEvents`` (or a bare list of events),
``ph: "M"`` events naming processes (planes: ``/host:CPU``, ``/device:TPU:0``) and threads (lines:
``XLA Ops``, ``Stream #14(...)``), ``ph: "X"`` events with ``ts``/``dur`` in microseconds and
``args`` holding the event's stats as text.

``traceEvents`` is decoded one event at a time from text read in chunks (stdlib ``json``): a
100 MB ``.json.gz`` never becomes one Python object per event. Each thread's ``ph: "X"`` events
become columns (name and arg codes, times in ns); ``ph: "M"`` events name processes and threads.
Host events that are neither ops, steps, compiles nor dispatches (the Python tracer's frames, the
runtime's own spans) are dropped as they are read.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace.columns import Vocabulary
from hlo_doctor.trace.conventions import COMPILE_MARKERS

# Names as jax and xprof write them; any other ``.json.gz`` is read as a trace too.
TRACE_JSON_SUFFIXES = (".trace.json", ".trace.json.gz", "perfetto_trace.json", "perfetto_trace.json.gz")
HINT = "pass a trace-viewer JSON (<host>.trace.json.gz, perfetto_trace.json.gz, xprof's trace_viewer export)"
_CHUNK = 1 << 22  # characters decoded per read: memory stays bounded on a 100 MB .json.gz
_SEP = re.compile(r"[\s,]*")
_WS = re.compile(r"\s*")
# Host events worth keeping (the Python tracer writes millions of others).
_HOST_KEEP = re.compile("|".join([*(re.escape(m) for m in COMPILE_MARKERS), r"^PjitFunction\("]))
NONE = -(1 << 62)
"""``no value`` in the integer columns."""
INFO_KEYS = ("hlo_op", "hlo_module", "long_name", "program_id", "module")
"""The args kept per event, interned as one tuple (a few hundred distinct in millions of events)."""
_DECODE = json.JSONDecoder().raw_decode
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




def _time(v: Any) -> float | None:
    """A ``ts``/``dur`` (a JSON number); None for anything else."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _int_arg(v: Any) -> int | None:
    """An integer arg (the converter writes every stat as text)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return int(v) if isinstance(v, float) and v.is_integer() else None


def _float_arg(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) else math.nan


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

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and durations (ns), on the device clock where the args give it.

        ``device_offset_ps`` counts from the line's start on the device clock, which the file does
        not give: the line is placed at the median of ``ts - device_offset`` over its events (one
        constant per line, so spacing and nesting are the device's own).
        """
        ts, dur = np.frombuffer(self.ts, np.float64), np.frombuffer(self.dur, np.float64)
        off, ddur = np.frombuffer(self.dev_off, np.float64), np.frombuffer(self.dev_dur, np.float64)
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
            fh: TextIO = gzip.open(self.path, "rt", encoding="utf-8") if gz else \
                self.path.open("r", encoding="utf-8")
            with fh:
                self._parse(fh)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
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

    def _parse(self, fh: TextIO) -> None:
        self.fh, self.buf, self.pos, self.eof = fh, "", 0, False
        self._more()
        self._skip(_WS)
        if self.pos >= len(self.buf):
            raise self._bad("empty file")
        if self.buf[self.pos] == "[":
            self.pos += 1
            self.found = True
            self._events()
        elif self.buf[self.pos] == "{":
            self.pos += 1
            self._object()
        else:
            raise self._bad("not a trace: neither a JSON object with traceEvents nor a list of events")

    def _more(self, at_least: int = 0) -> bool:
        """Append the next chunk (at least ``at_least`` characters: a value longer than a chunk)."""
        if self.eof:
            return False
        data = self.fh.read(max(_CHUNK, at_least))
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + data
        self.pos = 0
        return True

    def _skip(self, pattern: re.Pattern[str]) -> None:
        while True:
            self.pos = pattern.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or not self._more():
                return

    def _value(self) -> Any:
        """The next JSON value (read more text while it is cut off at the end of the buffer)."""
        while True:
            try:
                value, self.pos = _DECODE(self.buf, self.pos)
                return value
            except json.JSONDecodeError as exc:
                if not self._more(len(self.buf) - self.pos):
                    raise self._bad(f"not valid JSON ({exc.msg}): truncated or corrupt") from exc
            except RecursionError:
                raise self._bad("JSON nested too deeply") from None

    def _object(self) -> None:
        """The top-level object: ``traceEvents`` is streamed, other keys decoded and dropped."""
        while True:
            self._skip(_SEP)
            if self.pos >= len(self.buf):
                raise self._bad("not valid JSON: the top-level object is cut off (truncated)")
            if self.buf[self.pos] == "}":
                return
            key = self._value()
            self._skip(_WS)
            if not self.buf.startswith(":", self.pos):
                raise self._bad(f"not valid JSON: no ':' after key {key!r}")
            self.pos += 1
            self._skip(_WS)
            if key == "traceEvents":
                if not self.buf.startswith("[", self.pos):
                    raise self._bad("traceEvents is not a list of events")
                self.pos += 1
                self.found = True
                self._events()
            else:
                self._value()

    def _events(self) -> None:
        on_x, on_m = self._x, self._m
        while True:
            self._skip(_SEP)
            if self.pos >= len(self.buf):
                raise self._bad("not valid JSON: traceEvents is cut off (truncated)")
            if self.buf[self.pos] == "]":
                self.pos += 1
                return
            ev = self._value()
            if not isinstance(ev, dict):
                self.bad_events += 1
                continue
            ph = ev.get("ph")
            if ph == "X":
                on_x(ev)
            elif ph == "M":
                on_m(ev)

    # -- events ----------------------------------------------------------------------------------

    def _m(self, ev: dict[str, Any]) -> None:
        args = ev.get("args")
        name = args.get("name") if isinstance(args, dict) else None
        if not isinstance(name, str):
            return
        if ev.get("name") == "process_name":
            self.processes[ev.get("pid")] = name
        elif ev.get("name") == "thread_name":
            self.threads[(ev.get("pid"), ev.get("tid"))] = name

    def _x(self, ev: dict[str, Any]) -> None:
        ts, dur = _time(ev.get("ts")), _time(ev.get("dur"))
        if ts is None or dur is None or dur < 0:
            self.bad_times += 1
            return
        pid = ev.get("pid")
        name = ev.get("name")
        name = name if isinstance(name, str) else str(name or "")
        args = ev.get("args")
        info, run, off, ddur, step, group = 0, -1, math.nan, math.nan, NONE, NONE
        if isinstance(args, dict) and args:
            key = tuple(None if (v := args.get(k)) is None else str(v) for k in INFO_KEYS)
            if key != (None,) * len(INFO_KEYS):
                info = self.infos.code(key)
            if (r := _int_arg(args.get("run_id"))) is not None:
                run = r
            if "device_offset_ps" in args:
                off = _float_arg(args["device_offset_ps"])
            if "device_duration_ps" in args:
                ddur = _float_arg(args["device_duration_ps"])
            if "step_num" in args:
                s = _int_arg(args["step_num"])
                step = s if s is not None else -1
            if (g := _int_arg(args.get("group_id"))) is not None:
                group = g
        # The Python tracer and runtime write most host events: only ops, steps, compiles and
        # dispatches are kept (a process named later is kept whole and sorted out at the end).
        if info == 0 and step == NONE and "/host:" in self.processes.get(pid, "/host:") \
                and pid in self.processes and not _HOST_KEEP.search(name):
            return
        key2 = (pid, ev.get("tid"))
        line = self.lines.get(key2)
        if line is None:
            line = self.lines[key2] = EventLine()
        line.names.append(self.names.code(name))
        line.infos.append(info)
        line.ts.append(ts * 1e3)
        line.dur.append(dur * 1e3)
        line.run.append(run)
        line.dev_off.append(off)
        line.dev_dur.append(ddur)
        line.step.append(step)
        line.group.append(group)

