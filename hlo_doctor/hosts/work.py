"""The work on one host's file, wherever it runs: read it, sum its op events, hand back the sums.

What goes back (:class:`HostPart`) is small whatever the file's size: the host's metadata (modules,
versions, steps, compile events...) and the sums its table rows and breakdown are built from, never
its events. A file that cannot be read comes back as a :class:`HostFailure` naming it.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.opstats.build import modules_from_trace
from hlo_doctor.opstats.host_time import FrameKinds
from hlo_doctor.opstats.io import op_texts_from_xprof
from hlo_doctor.opstats.totals import EventTotals, StepChoice, event_totals
from hlo_doctor.trace.columns import OpColumns, trim_freed_memory
from hlo_doctor.trace.dispatch import read_host_dispatch
from hlo_doctor.trace.model import HostDispatch
from hlo_doctor.trace.read import HostRead, combine_hosts, observed, observed_by_any, read_host


@dataclass(frozen=True, slots=True)
class HostTask:
    """One host file to read."""

    path: str
    """The file as the command names it (in results and messages)."""
    location: str = ""
    """Where a worker reads it: the absolute path (shared storage); default ``path``."""
    data: bytes | None = None
    """The file's bytes, shipped where a worker cannot see ``path``."""
    choice: StepChoice | None = None
    """The capture's steps, once decided over every host; None: this host's own."""
    dispatch: bool = False
    """Also count the host's dispatch spans (what ``diagnose`` needs)."""
    frame_paths: tuple[tuple[str, str], ...] | None = None
    """Base name -> full path of the capture's source files (``FrameKinds.paths`` of its modules),
    when the command parsed the modules already: the worker then parses none (nor imports jax)."""
    keep_modules: bool = True
    """Hand back the host's HLO modules (False: the command has them)."""
    frame_paths_follow: bool = False
    """The frame paths come later (a local worker starts reading while the command parses the
    modules): the worker waits for them only if the host has Python frames to classify."""
    breakdown: bool = True
    """Sum the host's part of the step breakdown (False: the command does not read it, as ``gate``)."""
    overlap: bool = False
    """Build the host's part of the breakdown in a thread beside its sums (a little faster, a little
    more memory at the read's end): where the process reading it holds no other host's sums."""


@dataclass(frozen=True, slots=True)
class FramePathsFile:
    """Names the file that holds the capture's frame paths (:attr:`HostTask.frame_paths`, pickled),
    told to a local worker once the command has parsed the modules (:attr:`HostTask.frame_paths_follow`).
    The paths travel in a file so that the message stays a few bytes: the command never blocks
    writing to a worker that is itself blocked writing its answer."""

    path: str

    def load(self) -> tuple[tuple[str, str], ...]:
        """The frame paths."""
        with open(self.path, "rb") as f:
            paths: tuple[tuple[str, str], ...] = pickle.load(f)  # noqa: S301 - written by the command
        return paths

    @classmethod
    def write(cls, path: str, paths: tuple[tuple[str, str], ...]) -> FramePathsFile:
        """Write ``paths`` to ``path``; the message naming it."""
        with open(path, "wb") as f:
            pickle.dump(paths, f, protocol=pickle.HIGHEST_PROTOCOL)
        return cls(path)


@dataclass(frozen=True, slots=True)
class HostPart:
    """What one host file adds to the capture."""

    read: HostRead
    """The host's metadata, its compile events annotated with its own op events."""
    totals: EventTotals | None
    """The sums of its op events; None for a host without op events."""
    op_texts: tuple[tuple[str, int, str, str], ...] = ()
    """(module, program id, op, HLO text) from xprof's hlo_stats, for a device trace without modules."""
    dispatch: tuple[HostDispatch, ...] | None = None
    seconds: float = 0.0
    """Wall time of the work."""
    peak_rss_mib: float = 0.0
    """Peak resident memory of the process that did it, when known."""


@dataclass(frozen=True, slots=True)
class HostFailure:
    """A host file whose work failed: it cannot be read, a worker could not see it, or died on it."""

    path: str
    reason: str
    kind: str = "input"
    """``input`` (the file is unreadable: named or left out), ``missing`` (the worker cannot see the
    path: ship its bytes), ``died`` (the worker died twice on it)."""


def peak_rss_mib() -> float:
    """This process's peak resident memory (``VmHWM``) in MiB; 0 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


FramePathsLater = Callable[[], tuple[tuple[str, str], ...]]
"""Waits for the capture's frame paths (a task whose :attr:`~HostTask.frame_paths_follow`)."""


def read_one(task: HostTask, later: FramePathsLater | None = None) -> HostPart | HostFailure:
    """Do one host's work (see the module's docstring); never raises for a bad file. ``later``
    gives the frame paths of a task whose paths follow."""
    t0 = time.perf_counter()
    if task.data is None and not os.path.isfile(task.location or task.path):
        return HostFailure(task.path, "no such file where this worker runs", kind="missing")
    try:
        part = _read(task, later)
    except InputError as exc:
        return HostFailure(task.path, exc.what)
    except MemoryError:
        return HostFailure(task.path, "out of memory while reading it", kind="died")
    trim_freed_memory()  # (what the host's sums freed: not resident while the next host is read)
    return dataclasses.replace(part, seconds=time.perf_counter() - t0, peak_rss_mib=peak_rss_mib())


def _read(task: HostTask, later: FramePathsLater | None) -> HostPart:
    source: Path | bytes = task.data if task.data is not None else Path(task.location or task.path)
    cols = OpColumns()
    read = read_host(source, cols, origin=task.path)
    if not read.ops:
        return HostPart(read=dataclasses.replace(read, compiles_annotated=True,
                                                 protos=read.protos if task.keep_modules else []),
                        totals=None, dispatch=_dispatch(task))
    trace = combine_hosts([read], cols.finish())
    del cols

    def frame_kinds() -> FrameKinds:
        # Only when the breakdown classifies Python frames; from the command's modules when it has them.
        if task.frame_paths is not None:
            return FrameKinds(dict(task.frame_paths))
        if task.frame_paths_follow and later is not None:
            return FrameKinds(dict(later()))
        return FrameKinds.from_modules(modules_from_trace(trace)[0])

    totals = event_totals(trace, frame_kinds, task.choice, breakdown=task.breakdown, overlap=task.overlap)
    if task.data is None and observed_by_any() and any(part.driver_threads for part in totals.breakdown):
        # A host read in the command's process, with a driver thread whose host time a rule will
        # read with the op intervals (lint.trace_capture): kept from this read, not read again.
        observed([Path(task.location or task.path)], trace)
    texts: tuple[tuple[str, int, str, str], ...] = ()
    if trace.backend != "cpu" and not trace.module_protos:
        texts = tuple(_xprof_texts(task))
    # The step marks stay here: the sums hold what they decided (and the compiles their steps).
    read = dataclasses.replace(read, compiles=list(trace.compile_events), compiles_annotated=True,
                               protos=read.protos if task.keep_modules else [], steps=[], device_steps=[])
    return HostPart(read=read, totals=totals, op_texts=texts, dispatch=_dispatch(task))


def _dispatch(task: HostTask) -> tuple[HostDispatch, ...] | None:
    if not task.dispatch:
        return None
    with _on_disk(task) as path:
        return read_host_dispatch([path])


def _xprof_texts(task: HostTask) -> list[tuple[str, int, str, str]]:
    with _on_disk(task) as path:
        return op_texts_from_xprof([path])


class _on_disk:  # noqa: N801 - used as a context manager, like open()
    """The task's file as a path: its own, or its shipped bytes in a temporary file."""

    def __init__(self, task: HostTask) -> None:
        self.task = task
        self.tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Path:
        if self.task.data is None:
            return Path(self.task.location or self.task.path)
        self.tmp = tempfile.TemporaryDirectory(prefix="hlo-doctor-host-")
        path = Path(self.tmp.name) / Path(self.task.path).name
        path.write_bytes(self.task.data)
        return path

    def __exit__(self, *exc: object) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()
