"""Decoding trace events into records that hold only what the reader keeps; inflating the gzip.

With ``msgspec`` (a dependency; its decoder is compiled), a batch of events is decoded straight into
:class:`Event` records: ``ph``, ``pid``, ``tid``, ``name``, ``ts``, ``dur`` and ``args`` reduced to the
stats in :data:`ARG_FIELDS`. Every other key (the Python tracer's args, xprof's flow ids, the
metadata of the file) is skipped by the decoder without becoming a Python object: on a capture of
millions of events this is most of the reading time saved (about 7x the stdlib's speed here).

Without it (a platform msgspec does not install on) the stdlib ``json`` decodes the batch and each
event is wrapped in the same attributes (:class:`_DictEvent`). A batch msgspec cannot type (an
``args`` that is not an object, an entry that is not an event) goes the same way, so both paths read
every file alike; an entry that is not an object becomes None.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path
from typing import Annotated, Any, BinaryIO

ARG_FIELDS = ("hlo_op", "hlo_module", "long_name", "program_id", "module", "step_num", "run_id",
              "device_offset_ps", "device_duration_ps", "group_id", "name")
"""The ``args`` the records of both paths hold (``name``: a process or thread name of a ``ph: "M"``
event). An op's ``source`` and ``source_stack`` are read apart (:func:`decode_sources`); the
stdlib's records hold them too."""
EVENT_FIELDS = ("ph", "pid", "tid", "name", "ts", "dur", "args")
_RAW_ARGS = ("hlo_op", "hlo_module", "long_name", "program_id", "module", "source", "source_stack", "name")
"""Args kept as written (text); the others are numbers: ``step_num``, ``run_id`` and ``group_id``
integers, ``device_offset_ps`` and ``device_duration_ps`` floats (None when absent)."""


NONE = -(1 << 62)
"""``no value`` in the integer columns."""
_INT64 = 1 << 63


def int_arg(v: Any, default: int) -> int:
    """An integer arg (the converter writes every stat as text); ``default`` when it is none or
    does not fit 64 bits."""
    if type(v) is int:
        n = v
    elif type(v) is str:
        try:
            n = int(v)
        except ValueError:
            return default
    elif type(v) is float and v.is_integer():
        n = int(v)
    else:
        return default
    return n if -_INT64 <= n < _INT64 else default


def float_arg(v: Any) -> float:
    """A float arg (NaN when it is none or not finite)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) else math.nan


class _DictArgs:
    """An event's ``args`` object as attributes (the stdlib path)."""

    __slots__ = (*ARG_FIELDS, "source", "source_stack")

    def __init__(self, d: dict[str, Any]) -> None:
        get = d.get
        for key in _RAW_ARGS:
            setattr(self, key, get(key))
        # As msgspec types them: numbers (from text too), a value that is not one a default.
        v = get("step_num")
        self.step_num = None if v is None else int_arg(v, -1)
        v = get("run_id")
        self.run_id = None if v is None else int_arg(v, -1)
        v = get("group_id")
        self.group_id = None if v is None else int_arg(v, NONE)
        v = get("device_offset_ps")
        self.device_offset_ps = None if v is None else float_arg(v)
        v = get("device_duration_ps")
        self.device_duration_ps = None if v is None else float_arg(v)


class _DictEvent:
    """One event object as attributes (the stdlib path); ``args`` None unless it is an object."""

    __slots__ = EVENT_FIELDS

    def __init__(self, d: dict[str, Any]) -> None:
        get = d.get
        self.ph, self.pid, self.tid, self.name = get("ph"), get("pid"), get("tid"), get("name")
        self.ts, self.dur = get("ts"), get("dur")
        args = get("args")
        self.args = _DictArgs(args) if type(args) is dict and args else None


def from_value(value: Any) -> Any:
    """An event record from a decoded JSON value; None for a value that is not an object."""
    return _DictEvent(value) if type(value) is dict else None


def _stdlib(text: bytes | str) -> list[Any]:
    return [_DictEvent(v) if type(v) is dict else None for v in json.loads(text)]


try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; kept for platforms it does not build on
    msgspec = None  # type: ignore[assignment]

if msgspec is not None:
    _Int64 = Annotated[int, msgspec.Meta(ge=-_INT64, le=_INT64 - 1)]

    class Args(msgspec.Struct, gc=False):
        """The stats of an event's ``args`` the reader reads. The converter writes stats as text:
        the numeric ones are converted by the decoder (``strict=False``); a value that is not a
        number fails the batch, which then goes the stdlib way (:func:`decode_events`)."""

        hlo_op: Any = None
        hlo_module: Any = None
        long_name: Any = None
        program_id: Any = None
        module: Any = None
        step_num: _Int64 | None = None
        run_id: _Int64 | None = None
        device_offset_ps: float | None = None
        device_duration_ps: float | None = None
        group_id: _Int64 | None = None
        name: Any = None

    class Event(msgspec.Struct, gc=False):
        """One ``traceEvents`` entry: the keys the reader reads, nothing else."""

        ph: Any = None
        pid: Any = None
        tid: Any = None
        name: Any = None
        ts: Any = None
        dur: Any = None
        args: Args | None = None

    _DECODER: Any = msgspec.json.Decoder(list[Event], strict=False)

    class _StackArgs(msgspec.Struct, gc=False):
        source: Any = None
        source_stack: Any = None

    class _StackEvent(msgspec.Struct, gc=False):
        args: _StackArgs | None = None

    _STACKS: Any = msgspec.json.Decoder(list[_StackEvent], strict=False)
else:  # pragma: no cover
    _DECODER = _STACKS = None

try:
    from isal import igzip, isal_zlib
except ImportError:  # pragma: no cover - isal is a dependency; kept for platforms it does not build on
    igzip = isal_zlib = None  # type: ignore[assignment]

BACKEND = ("msgspec" if _DECODER is not None else "json") + (" + isal" if igzip is not None else " + zlib")
"""Which decoder and gzip reader read the files (said by the benchmark)."""
GZIP_ERRORS: tuple[type[Exception], ...] = (EOFError, zlib.error, gzip.BadGzipFile)
if isal_zlib is not None:
    GZIP_ERRORS += (isal_zlib.error,)  # type: ignore[assignment, operator]
"""What a truncated or corrupt gzip raises."""


def open_gzip(path: Path | BinaryIO) -> BinaryIO:
    """A gzip file's inflated bytes: by ISA-L (isal) where installed, about 3x zlib's speed (a
    100 MB ``.json.gz`` inflates to about 1 GB of text), else by the stdlib."""
    if igzip is None:  # pragma: no cover
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if not isinstance(path, Path):
        return igzip.IGzipFile(fileobj=path, mode="rb")  # type: ignore[return-value]
    return igzip.open(path, "rb")  # type: ignore[no-any-return]


# Names as jax and xprof write them; any other ``.json.gz`` is read as a trace too.
TRACE_JSON_SUFFIXES = (".trace.json", ".trace.json.gz", "perfetto_trace.json", "perfetto_trace.json.gz")


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


_DECODE = json.JSONDecoder().raw_decode


def decode_value(buf: bytes | bytearray, pos: int, size: int, *, eof: bool) -> tuple[Any, int]:
    """The JSON value at ``buf[pos:]`` (UTF-8) and the position after it, by the stdlib, from a
    window of ``size`` bytes.

    A character cut by the window's end is left out unless the window reaches the end of the file
    (``eof``: ``buf`` holds its rest). Raises ``json.JSONDecodeError`` when the value is invalid or
    runs past the window, ``UnicodeDecodeError`` for bytes that are not UTF-8.
    """
    window = buf[pos:pos + size]
    try:
        text = window.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data" or (eof and pos + size >= len(buf)):
            raise
        text = window[:exc.start].decode("utf-8")
    value, end = _DECODE(text)
    return value, pos + (end if text.isascii() else len(text[:end].encode("utf-8")))


def decode_events(text: bytes | str | memoryview) -> list[Any]:
    """The events of ``text``, a JSON array of events, as records (None for a non-object entry).

    Raises ``ValueError`` (or ``RecursionError``) when ``text`` is not valid JSON.
    """
    if _DECODER is not None:
        try:
            events: list[Any] = _DECODER.decode(text)
            return events
        except msgspec.ValidationError:
            pass  # valid JSON that is not shaped as events everywhere: decoded generically below
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from None
    return _stdlib(text.tobytes() if isinstance(text, memoryview) else text)


def decode_sources(text: bytes | memoryview) -> list[tuple[Any, Any] | None]:
    """``(source, source_stack)`` args of each entry of ``text`` (a JSON array of events), None
    where it has neither: one per entry, as :func:`decode_events` returns them.

    An op's stack is its longest arg (every frame of its Python stack, in every event of the op):
    the records leave both out, and the reader decodes again, with this, only the few batches in
    which an op is met first (decoding them everywhere costs about a tenth of the reading).
    """
    if _STACKS is not None:
        try:
            return [(a.source, a.source_stack) if (a := e.args) is not None
                    and (a.source is not None or a.source_stack is not None) else None for e in _STACKS.decode(text)]
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass  # as decode_events: an entry that is not an event object
    values = json.loads(text.tobytes() if isinstance(text, memoryview) else text)
    return [(a.get("source"), a.get("source_stack")) if type(v) is dict and type(a := v.get("args")) is dict
            and (a.get("source") is not None or a.get("source_stack") is not None) else None for v in values]
