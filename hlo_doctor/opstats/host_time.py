"""What the host's driver thread was doing at each instant: Python, dispatch, compile or waiting.

The driver thread's events (:mod:`hlo_doctor.trace.python_frames`) nest as calls do. One sweep over
them cuts the thread's time into segments, each labelled by the calls open then:

- ``compile``: inside XLA's compile (a backend compile event, or a compile that
  :func:`hlo_doctor.trace.compiles.group_compiles` put together: lowering included);
- ``dispatch``: inside jax's dispatch of a program (``PjitFunction(<name>)``), target ``jit_<name>``;
- ``wait``: inside ``block_until_ready`` (the host waits for the devices), or, on XLA:CPU, inside the
  client's execution of a program it dispatched (XLA:CPU's threads run it while the host waits);
- ``python``: any other Python frame;
- ``untraced``: no event open (C++ the tracer does not see, or a capture without the Python tracer).

Each segment also names WHERE: the innermost frame outside the frameworks (the line a person edits;
for a dispatch or compile, the caller's). The Python tracer gives only a file's base name, so a frame
is a framework's when the trace's HLO metadata (full paths) says so, or else when an installed
framework or the standard library holds a file of that name (:class:`FrameKinds`).
"""

from __future__ import annotations

import heapq
import importlib.util
import itertools
import os
import re
import sysconfig
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.call_sites import starts_at
from hlo_doctor.hlo.frames import framework_of, frameworks
from hlo_doctor.trace.compiles import Compile, module_of_function
from hlo_doctor.trace.conventions import BACKEND_COMPILE_MARKERS, DISPATCH_PREFIX, EXECUTE_MARKER
from hlo_doctor.trace.cwire import SEGMENTS_COMPILED, segments
from hlo_doctor.trace.python_frames import DriverThread, PyFrame, parse_frame

_WAIT_FUNCTIONS = frozenset({"block_until_ready"})
# The name given to a compile of :func:`~hlo_doctor.trace.compiles.group_compiles` opened as an event.
_COMPILE_SPAN = "\x00compile "
_LOWERING = ("_pjit_lower", "lower_sharding_computation", "compile_or_get_cached", "_cached_compilation")


@dataclass(frozen=True, slots=True)
class Label:
    """What one segment of the driver thread's time was."""

    kind: str
    where: str = ""
    """``runner.py:135 _sample_from_logits``: the innermost frame outside the frameworks (the caller,
    for a dispatch); "" when every open frame is a framework's."""
    target: str = ""
    """The program dispatched or compiled (``jit_sample``), or for Python the first framework call made
    from ``where`` (``array_methods.py:116 _astype``); "" when the time is in ``where`` itself."""


@dataclass(frozen=True, slots=True)
class Segments:
    """The driver thread's time cut into labelled, non-overlapping segments, sorted by start (ns)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    label: np.ndarray
    """Index into :attr:`labels` (int32)."""
    labels: tuple[Label, ...]


@lru_cache(maxsize=4)
def _installed_files(prefixes: tuple[str, ...]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Base name -> (path relative to the import root, absolute path) of each file of the installed
    frameworks and of the standard library (``("jax/_src/api.py", "/.../site-packages/jax/_src/api.py")``)."""
    found: dict[str, list[tuple[str, str]]] = {}
    roots: list[tuple[str, str]] = []  # (folder, its path relative to the import root)
    for prefix in prefixes:
        try:
            spec = importlib.util.find_spec(prefix)
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is None:
            continue
        rel = prefix.replace(".", "/")
        if spec.submodule_search_locations:
            roots.extend((folder, rel) for folder in spec.submodule_search_locations)
        elif spec.origin:
            name = os.path.basename(spec.origin)
            found.setdefault(name, []).append((f"{rel.rpartition('/')[0]}/{name}".lstrip("/"), spec.origin))
    stdlib = sysconfig.get_paths().get("stdlib", "")
    if stdlib:
        roots.append((stdlib, ""))
    for root, rel_root in roots:
        for folder, subdirs, files in os.walk(root):
            # Installed packages are not the standard library; tests are never on a hot path.
            subdirs[:] = [d for d in subdirs if d not in ("site-packages", "dist-packages", "test", "tests")]
            rel = os.path.relpath(folder, root).replace(os.sep, "/")
            base = rel_root if rel == "." else f"{rel_root}/{rel}".lstrip("/")
            for f in files:
                if f.endswith(".py"):
                    found.setdefault(f, []).append((f"{base}/{f}" if base else f, os.path.join(folder, f)))
    return {name: tuple(paths) for name, paths in found.items()}


_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.MULTILINE)


@lru_cache(maxsize=2048)
def _defined_names(path: str) -> frozenset[str]:
    """Names of the functions and classes a source file defines (empty when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return frozenset(_DEF.findall(f.read()))
    except OSError:
        return frozenset()


class FrameKinds:
    """Tells a framework's frame from one a person edits, by the frame's base name and function.

    ``paths`` maps base names to the full paths the trace's HLO metadata gives (the stacks of traced
    ops, captured on whichever machine): a base name found there is classified by its path, a
    framework's when :func:`hlo_doctor.hlo.frames.framework_of` says so or when the path ends with
    the path of a file of an installed framework (``.../hlo_doctor/capture.py`` captured elsewhere).
    Any other frame is a framework's when a file of that name in an installed framework or the
    standard library defines a function of that name (``runner.py execute_decode`` is not pytest's
    ``runner.py``); ``<lambda>``, ``<genexpr>``... are matched by the file name alone.
    """

    def __init__(self, paths: dict[str, str] | None = None) -> None:
        self._installed = _installed_files(tuple(p for p in frameworks() if p != "python"))
        self.paths = dict(paths or {})
        self.candidates: dict[str, tuple[str, ...]] = {}
        """Base names the HLO's stacks give several full paths for (sorted): :meth:`prefer` picks one."""
        self._user = {base for base, path in self.paths.items() if not self.path_is_framework(path)}
        self._cache: dict[tuple[str, str, bool], bool] = {}
        self.by_definition = False
        """Inside a framework's call too, a file of that name must define the function (set for a
        trace JSON: without the HLO metadata's paths, ``runner.py`` called back by the capture loop
        would otherwise be pytest's)."""

    def path_is_framework(self, path: str) -> bool:
        """True when ``path`` (a full path) is a framework's or the standard library's file."""
        if framework_of(path):
            return True
        p = "/" + path.replace("\\", "/").lstrip("/")
        return any(p.endswith("/" + rel) for rel, _ in self._installed.get(os.path.basename(p), ()))

    @classmethod
    def empty(cls) -> FrameKinds:
        """Kinds for a capture without Python frames: nothing to classify, nothing read from disk."""
        kinds = cls.__new__(cls)
        kinds._installed, kinds.paths, kinds._user, kinds._cache = {}, {}, set(), {}
        kinds.candidates = {}
        kinds.by_definition = False
        return kinds

    @classmethod
    def from_modules(cls, modules: Iterable[HloModule], files: Iterable[str] = ()) -> FrameKinds:
        """Base name -> full path from every frame of every instruction's stack, and ``files`` (a
        trace JSON's op stacks: :attr:`~hlo_doctor.trace.model.Trace.stack_files`); user paths win."""
        files = {f for f in files if f and not f.startswith("<")} | {
            f.file for m in modules for inst in m.instructions() for f in inst.stack
            if f.file and not f.file.startswith("<")}
        kinds = cls()
        framework = {path: kinds.path_is_framework(path) for path in files}
        paths: dict[str, str] = {}
        candidates: dict[str, list[str]] = {}
        for path in sorted(files):
            base = os.path.basename(path)
            candidates.setdefault(base, []).append(path)
            if base not in paths or (framework[paths[base]] and not framework[path]):
                paths[base] = path
        made = cls(paths)
        made.candidates = {base: tuple(found) for base, found in candidates.items() if len(found) > 1}
        return made

    def prefer(self, path: str) -> None:
        """Name ``path`` (a file the capture ran: ``profile``'s target) for its base name where the
        HLO's stacks name several files of that name (a program twin in another folder that traced a
        cached eager program first); matched by its trailing path parts, so a relative target works."""
        tail = tuple(p for p in path.replace("\\", "/").split("/") if p not in ("", "."))
        if not tail:
            return
        named = [c for c in self.candidates.get(tail[-1], ())
                 if tuple(c.replace("\\", "/").split("/"))[-len(tail):] == tail]
        if len(named) == 1:
            self.paths[tail[-1]] = named[0]

    def is_framework(self, frame: PyFrame, *, called_from_framework: bool = False) -> bool:
        """True for a frame of a framework, the standard library, or a C function.

        ``called_from_framework``: the frame runs inside a framework's call; then a file of that
        name in a framework is enough (the installed release may not define the function the
        captured one did).
        """
        if not frame.is_python_file:
            return True
        key = (frame.file, frame.function, called_from_framework)
        known = self._cache.get(key)
        if known is None:
            if frame.file in self._user:
                known = False
            elif frame.file in self.paths:
                known = True
            else:
                candidates = self._installed.get(frame.file, ())
                loose = called_from_framework and not self.by_definition
                known = bool(candidates) and (loose or frame.function.startswith("<") or any(
                    frame.function in _defined_names(path) for _, path in candidates))
            self._cache[key] = known
        return known

    def path(self, file: str) -> str:
        """The full path of a base name when the HLO metadata gives it, else the base name."""
        return self.paths.get(file, file)

    def path_of(self, file: str, function: str, line: int) -> str:
        """The full path of a tracer frame (``helpers.py:4 widen``): of the files of its base name the
        HLO's stacks name, the one (read on this machine) in which ``function`` starts at ``line``.
        Where every one of them is read here and none fits, the base name alone: the frame ran a
        file no op was traced in (jax reused an eager program another file traced first), and
        another file's path would be a wrong line. Else :meth:`path`'s."""
        found = self.candidates.get(file) or ((self.paths[file],) if file in self.paths else ())
        if found and function and line > 0:
            seen = [starts_at(p, line, function) for p in found]
            if seen.count(True) == 1:
                return found[seen.index(True)]
            if all(s is False for s in seen):
                return file
        return self.path(file)


def _child(parent: Label, name: str, kinds: FrameKinds, execution_waits: bool) -> Label:
    """The label while ``name`` is the innermost open event, inside ``parent``'s."""
    if parent.kind == "compile" or parent.kind == "wait":
        return parent
    if name.startswith(_COMPILE_SPAN):
        return Label("compile", parent.where,
                     name[len(_COMPILE_SPAN):] or (parent.target if parent.kind == "dispatch" else ""))
    if any(m in name for m in BACKEND_COMPILE_MARKERS) or any(m in name for m in _LOWERING):
        return Label("compile", parent.where, parent.target if parent.kind == "dispatch" else "")
    if parent.kind == "dispatch" and execution_waits and EXECUTE_MARKER in name:
        return Label("wait", parent.where, parent.target)  # XLA:CPU runs it while the host waits
    if parent.kind == "dispatch":
        return parent  # tracing a function on a cache miss is still its dispatch
    if name.startswith(DISPATCH_PREFIX):
        return Label("dispatch", parent.where, module_of_function(name[len(DISPATCH_PREFIX):-1]))
    frame = parse_frame(name)
    if frame is None:
        return parent
    if frame.function in _WAIT_FUNCTIONS:
        return Label("wait", parent.where, frame.text())
    if not kinds.is_framework(frame, called_from_framework=bool(parent.target)):
        return Label("python", frame.text(), "")
    if parent.target or not frame.is_python_file:
        return Label("python", parent.where, parent.target)
    return Label("python", parent.where, frame.text())


def host_segments(thread: DriverThread | None, kinds: FrameKinds, compiles: Sequence[Compile] = (), *,
                  execution_waits: bool = False) -> Segments:
    """The driver thread's time as labelled segments (see the module's docstring); label 0 is
    ``untraced``.

    ``execution_waits`` (XLA:CPU): the PJRT client's execution of a program inside a dispatch is the
    host waiting for XLA:CPU's threads to run it (``wait``), not dispatch work; XLA:CPU picks the
    program up late on a loaded machine, and that delay is no work of the host's.

    ``compiles`` (of this host) are opened like events: a compile that XLA ran on another thread
    while this one waited is compile time here too (without a driver thread, the compiles alone).
    A child event that outlives its parent is cut at the parent's end.
    """
    # The thread's events (sorted by start, longest first) merged with the compiles, a slice of the
    # arrays at a time: a driver thread holds millions of Python-tracer events, never a tuple each.
    spans = sorted(((c.start_us * 1e3, (c.start_us + c.duration_us) * 1e3, _COMPILE_SPAN + c.module) for c in compiles),
                   key=lambda ev: (ev[0], -ev[1]))
    if SEGMENTS_COMPILED:
        return _compiled_segments(thread, spans, kinds, execution_waits)
    events: Iterator[tuple[float, float, str]] = heapq.merge(_thread_events(thread), spans,
                                                             key=lambda ev: (ev[0], -ev[1]))
    first = next(events, None)
    if first is not None:
        events = itertools.chain((first,), events)
    code = _LabelCodes()
    labels = code.labels
    untraced = code(Label("untraced"))
    starts, ends, which = array("d"), array("d"), array("i")

    def emit(a: float, b: float, k: int) -> None:
        if b > a:
            starts.append(a)
            ends.append(b)
            which.append(k)

    stack: list[tuple[float, Label, int]] = []  # (end, label, its code)
    children: dict[tuple[Label, str], tuple[Label, int]] = {}
    t = first[0] if first is not None else 0.0
    for start, end, name in events:
        while stack and stack[-1][0] <= start:
            top_end, _, k = stack.pop()
            emit(t, top_end, k)
            t = max(t, top_end)
        emit(t, start, stack[-1][2] if stack else untraced)
        t = max(t, start)
        parent = stack[-1][1] if stack else Label("python")
        end = min(end, stack[-1][0]) if stack else end
        # A label depends only on its parent's and the event's name: worked out once per pair (a
        # driver thread repeats a few hundred names millions of times).
        known = children.get((parent, name))
        if known is None:
            label = _child(parent, name, kinds, execution_waits)
            known = children[(parent, name)] = (label, code(label))
        stack.append((end, *known))
    while stack:
        top_end, _, k = stack.pop()
        emit(t, top_end, k)
        t = max(t, top_end)
    return Segments(np.frombuffer(starts, np.float64), np.frombuffer(ends, np.float64),
                    np.frombuffer(which, np.int32), tuple(labels))


class _LabelCodes:
    """Label -> its code, in the order the labels are first met."""

    def __init__(self) -> None:
        self.index: dict[Label, int] = {}
        self.labels: list[Label] = []

    def __call__(self, label: Label) -> int:
        k = self.index.get(label)
        if k is None:
            k = self.index[label] = len(self.labels)
            self.labels.append(label)
        return k


def _compiled_segments(thread: DriverThread | None, spans: list[tuple[float, float, str]], kinds: FrameKinds,
                       execution_waits: bool) -> Segments:
    """:func:`host_segments`'s walk by the compiled reader (``cwire.segments``), the labels worked
    out here as the loop does, once per (parent label, name), in the order the walk meets them."""
    names = list(thread.names) if thread is not None else []
    known: dict[str, int] = {}
    span_codes = []
    for _, _, name in spans:
        if name not in known:
            known[name] = len(names)
            names.append(name)
        span_codes.append(known[name])
    span_starts = np.asarray([s[0] for s in spans], np.float64)
    span_ends = np.asarray([s[1] for s in spans], np.float64)
    if thread is None:
        starts, ends, codes = span_starts, span_ends, np.asarray(span_codes, np.int32)
    else:
        # heapq.merge of the two sorted runs (by start, longest first; the thread's event first where
        # both tie): the few compiles put in their places, not the thread's millions of events sorted.
        starts, ends, codes = thread.start_ns, thread.end_ns, thread.name_code  # (int32: no copy)
        if spans:
            lo = np.searchsorted(starts, span_starts, side="left")
            hi = np.searchsorted(starts, span_starts, side="right")
            at = lo + np.asarray([int((ends[a:b] >= end).sum()) for a, b, end in
                                  zip(lo.tolist(), hi.tolist(), span_ends.tolist(), strict=True)], np.int64)
            starts, ends = np.insert(starts, at, span_starts), np.insert(ends, at, span_ends)
            codes = np.insert(codes, at, np.asarray(span_codes, np.int32))
    code = _LabelCodes()
    labels = code.labels
    untraced, root = code(Label("untraced")), Label("python")

    def label_of(parent: int, name: int) -> int:
        return code(_child(root if parent < 0 else labels[parent], names[name], kinds, execution_waits))

    s, e, k = segments(starts, ends, codes, untraced, label_of)
    return Segments(s, e, k, tuple(labels))


def _thread_events(thread: DriverThread | None, chunk: int = 1 << 16) -> Iterator[tuple[float, float, str]]:
    """(start, end, name) of the thread's events in their order, converted a slice at a time."""
    if thread is None:
        return
    for a in range(0, len(thread), chunk):
        names = [thread.names[c] for c in thread.name_code[a:a + chunk].tolist()]
        yield from zip(thread.start_ns[a:a + chunk].tolist(), thread.end_ns[a:a + chunk].tolist(), names, strict=True)
