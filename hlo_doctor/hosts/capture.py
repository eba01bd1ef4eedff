"""Reading a capture of several host files: the work spread, the steps agreed, one table.

:func:`read_capture` takes what ``load_opstats`` takes. An export, a trace JSON or one small host
file is read as it always was; the host files of a log directory (and one large host file) are each
read by a worker (:class:`~hlo_doctor.hosts.local.LocalPool`, :class:`~hlo_doctor.hosts.cluster.DaskCluster`,
or this process one after another) and their parts merged (:mod:`.merge`). The command's process
parses the HLO modules once, before the workers start: they are told the source paths their
frames need and parse none.

Each host first decides its steps from its own events; the capture's steps are then decided from
the evidence of all (:func:`~hlo_doctor.opstats.totals.choose_steps`), and a host that chose
otherwise is read again under the common choice. A host file that cannot be read stops the
command, naming it, unless ``skip_bad_hosts``: then it is left out and the table says so.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.printer import PrinterCrash
from hlo_doctor.hlo.printer import warm as warm_printer
from hlo_doctor.hosts.local import HOST_TIMEOUT_S, InProcess, LocalPool, Result
from hlo_doctor.hosts.merge import merge_dispatch, merge_parts
from hlo_doctor.hosts.work import HostFailure, HostPart, HostTask, read_one
from hlo_doctor.opstats.build import modules_from_protos
from hlo_doctor.opstats.host_time import FrameKinds
from hlo_doctor.opstats.io import load_opstats, run_info_for
from hlo_doctor.opstats.schema import OpStats
from hlo_doctor.opstats.totals import (
    EventTotals,
    StepChoice,
    StepEvidence,
    TotalsSum,
    choose_steps,
    merge_evidence,
)
from hlo_doctor.trace import find_xplanes
from hlo_doctor.trace.dispatch import read_host_dispatch
from hlo_doctor.trace.locate import display_path, locate_capture
from hlo_doctor.trace.model import HostDispatch, ModuleProto
from hlo_doctor.trace.read import host_of, read_module_protos

if TYPE_CHECKING:
    from hlo_doctor.hosts.cluster import DaskCluster


@dataclass(frozen=True, slots=True)
class PodOptions:
    """How a capture's host files are read."""

    jobs: int = 1
    """Worker processes on this machine (1: each host in this process, one after another)."""
    scheduler: str | None = None
    """The address of a Dask scheduler to run the hosts' work on instead."""
    skip_bad_hosts: bool = False
    """Leave out a host file that cannot be read (and say so) instead of stopping."""
    host_timeout_s: float = HOST_TIMEOUT_S
    """How long one host file's read may take in a worker (local or Dask) before it counts as lost."""
    breakdown: bool = True
    """Build the step breakdown of hosts read by parts (False: the command does not read it, as
    ``gate``; the table and the per-step sums are the same)."""
    breakdown_steps: bool = True
    """Keep the breakdown's slice of each device and step (False: their sums alone, summed as the
    hosts are read, where the files name distinct hosts: what a command that shows the breakdown's
    summary and not its steps reads; the figures are the same)."""


Run = Callable[[Sequence[HostTask]], Iterable[Result]]
"""Runs tasks somewhere; yields (task index, result) as they finish."""


WORKER_MIN_BYTES = 32 << 20
"""A capture of one host file this large is read as a host of a pod is (its events summed, then
dropped: the command holds the table, not the file's events), in the command's own process (a
worker would cost a second interpreter and its imports, and one file has nothing to share the
work with); a smaller one is read whole, as it always was."""


def _runner(options: PodOptions, hosts: int) -> InProcess | LocalPool:
    if options.jobs <= 1 or hosts == 1:
        return InProcess()
    return LocalPool(min(options.jobs, hosts), timeout_s=options.host_timeout_s)


def _is_xplane_capture(path: Path) -> bool:
    return path.is_dir() or (path.is_file() and path.name.endswith(".pb"))


Read = tuple[OpStats, tuple[HostDispatch, ...] | None]
"""The op stats of a capture and its hosts' dispatch spans (:func:`read_capture`)."""


def read_capture(path: str | Path, options: PodOptions, *, dispatch: bool = False) -> Read:
    """The op stats of a capture (see the module's docstring) and, when ``dispatch`` and the hosts
    were read apart, their dispatch spans (None: read them with :func:`read_host_dispatch`).

    Raises:
        InputError: bad input (as :func:`~hlo_doctor.opstats.load_opstats`), a host file that cannot
            be read (without ``skip_bad_hosts``), a worker that died twice on one, an unreachable
            scheduler.
        NotAvailableError: ``scheduler`` without the ``distributed`` package.
    """
    return read_capture_sums(path, options, dispatch=dispatch)()


def read_capture_sums(path: str | Path, options: PodOptions, *, dispatch: bool = False) -> Callable[[], Read]:
    """:func:`read_capture` in two halves: the hosts are read and summed now, and their table is built
    when the returned function is called (once). The table loads pandas (35-77 MiB), so a command
    that reads two captures reads both before either table: pandas is not resident under the
    second read's peak. An export, a trace JSON or a small host file is read whole now.

    Raises:
        As :func:`read_capture`: the read's errors now, the merge's when the table is built.
    """
    p = Path(path)
    if p.is_dir():
        where = locate_capture(p)  # a doctor/verify folder: its baseline; several captures: refused
        if where.kind not in ("run", "xplane"):
            return _done(load_opstats(where.path))
        p = where.path
    if not _is_xplane_capture(p):
        return _done(load_opstats(p))
    xplanes = find_xplanes(p)
    if len(xplanes) < 2 and options.scheduler is None and _size(xplanes[0]) < WORKER_MIN_BYTES:
        return _done(load_opstats(p))
    warm_printer()  # XLA's printer starts (imports jaxlib) while the hosts are read
    if options.scheduler is None:
        parts, left_out, protos, modules, totals = _read_pod(xplanes, _runner(options, len(xplanes)), options, dispatch)
    else:
        from hlo_doctor.hosts.cluster import DaskCluster

        cluster = DaskCluster(options.scheduler, host_timeout_s=options.host_timeout_s)  # first: an unreachable scheduler stops it before any work
        try:
            parts, left_out, protos, modules, totals = _read_pod(xplanes, cluster, options, dispatch)
        finally:
            cluster.close()
    for part in parts:
        part.read.protos = protos[part.read.path]
    run = run_info_for(xplanes, p)

    def table() -> Read:
        stats = merge_parts(parts, source_path=str(p), run=run, left_out=left_out, modules=modules, totals=totals)
        stats = dataclasses.replace(stats, capture=tuple(display_path(x) for x in xplanes))
        return stats, (merge_dispatch(parts) if dispatch else None)
    return table


def _done(stats: OpStats) -> Callable[[], Read]:
    return lambda: (stats, None)


def _read_pod(xplanes: list[Path], runner: InProcess | LocalPool | DaskCluster, options: PodOptions, dispatch: bool
              ) -> tuple[list[HostPart], list[HostFailure], dict[str, list[ModuleProto]],
                         tuple[tuple[HloModule, ...], tuple[str, ...]], EventTotals | None]:
    """Every host's part (in the order of the files), the host files left out, each host's modules,
    the parsed modules of all, and the parts' sums (:func:`_read_hosts`)."""
    # The modules are parsed once, here; the workers are told the source paths their frames need
    # and parse nothing (nor import XLA); their parts come back without the modules. Local workers
    # start first and read their hosts meanwhile; they wait for the paths only if they need them.
    # A worker, or this process reading its one host, builds a host's breakdown beside its sums; this
    # process reading many hosts in turn does not (it holds the hosts' sums so far: the peak's margin).
    overlap = not (isinstance(runner, InProcess) and len(xplanes) > 1)
    tasks = [HostTask(str(x), str(x.resolve()), dispatch=dispatch, keep_modules=False,
                      frame_paths_follow=isinstance(runner, LocalPool), breakdown=options.breakdown,
                      overlap=overlap) for x in xplanes]
    if isinstance(runner, LocalPool):
        runner.begin(tasks)
    beside: list[Result] | None = None
    try:
        if isinstance(runner, InProcess) and len(xplanes) == 1:
            # One host read here: the modules are parsed beside it (XLA's printer, a process of its
            # own, may still be importing jaxlib), not before it.
            protos, unreadable, modules, frame_paths, beside = _read_beside_modules(xplanes, tasks[0], options)
        else:
            protos, unreadable, modules = _modules(xplanes, options)
            frame_paths = _frame_paths(modules)
            if isinstance(runner, LocalPool):
                runner.send_frame_paths(frame_paths)
        # (A host read again gets the paths with its task.)
        tasks = [dataclasses.replace(t, frame_paths=frame_paths, frame_paths_follow=False) for t in tasks]
        # A host the command could not read is left out (or stops it) whatever a worker says of it;
        # only the local workers, which started before the command knew, are given it at all.
        keep = [i for i, x in enumerate(xplanes) if str(x) in protos]
        first: Iterable[Result] = runner.results() if isinstance(runner, LocalPool) else \
            [r for r in beside if r[0] in keep] if beside is not None else \
            ((keep[j], r) for j, r in runner.run([tasks[i] for i in keep]))
        # The slices are summed in the table's order as the hosts arrive: hosts are named by their
        # files, so only where no two files name one host.
        fold = not options.breakdown_steps and len({host_of(x) for x in xplanes}) == len(xplanes)
        parts, left_out, totals = _read_hosts(runner.run, tasks, options, first, keep, fold)
    finally:
        if isinstance(runner, LocalPool):
            runner.close()
    order = {str(x): i for i, x in enumerate(xplanes)}
    return parts, sorted([*unreadable, *left_out], key=lambda f: order[f.path]), protos, modules, totals


def _frame_paths(modules: tuple[tuple[HloModule, ...], tuple[str, ...]]) -> tuple[tuple[str, str], ...]:
    """The capture's frame paths (:attr:`HostTask.frame_paths`) from its parsed modules."""
    return tuple(sorted(FrameKinds.from_modules(modules[0]).paths.items()))


_Modules = tuple[dict[str, list[ModuleProto]], list[HostFailure], tuple[tuple[HloModule, ...], tuple[str, ...]]]
"""Each readable host's module protos, the host files whose modules cannot be read, the parsed modules
and their notes (:func:`_modules`)."""


def _read_beside_modules(xplanes: list[Path], task: HostTask, options: PodOptions
                         ) -> tuple[dict[str, list[ModuleProto]], list[HostFailure],
                                    tuple[tuple[HloModule, ...], tuple[str, ...]], tuple[tuple[str, str], ...] | None,
                                    list[Result]]:
    """:func:`_modules` in a thread while the one host's ``task`` is read in this one (its frame
    paths, when its frames need them, wait for the modules); what both give, and the frame paths
    (made once, where the host's frames needed them). The thread mostly waits on the printer's
    process. Its error, if any, is raised once the host is read."""
    box: dict[str, Any] = {}

    def parse() -> None:
        try:
            box["modules"] = _modules(xplanes, options)
        except BaseException as exc:  # noqa: BLE001 - raised again in the command's thread
            box["error"] = exc

    thread = threading.Thread(target=parse, name="hlo-doctor-modules", daemon=True)
    thread.start()

    def parsed() -> _Modules:
        thread.join()
        if "error" in box:
            raise box["error"]
        found: _Modules = box["modules"]
        return found

    def paths() -> tuple[tuple[str, str], ...]:
        if "paths" not in box:
            box["paths"] = _frame_paths(parsed()[2])
        found: tuple[tuple[str, str], ...] = box["paths"]
        return found

    result = read_one(dataclasses.replace(task, frame_paths_follow=True), paths)
    protos, unreadable, modules = parsed()
    # The frame paths where the host's frames asked for them; else none are made (they walk the
    # installed frameworks' files, 40 ms), as one host is never read again (its steps are its own).
    return protos, unreadable, modules, box.get("paths"), [(0, result)]


def _modules(xplanes: list[Path], options: PodOptions) -> _Modules:
    """Each readable host's module protos, the hosts whose modules cannot be read, the parsed modules."""
    protos: dict[str, list[ModuleProto]] = {}
    unreadable: list[HostFailure] = []
    for x in xplanes:
        try:
            protos[str(x)] = read_module_protos(x)
        except InputError as exc:
            unreadable.append(_failed(HostFailure(str(x), exc.what), options))
    while True:
        if not protos:
            raise InputError(f"none of the {len(xplanes)} host files could be read: {unreadable[0].reason}",
                             "capture again; the files may be truncated or corrupt")
        try:
            return protos, unreadable, modules_from_protos(p for x in xplanes for p in protos.get(str(x), ()))
        except PrinterCrash as exc:  # XLA's printer died on one host's module: that host is bad
            bad = next((k for k, ps in protos.items() if any(p.path == exc.path for p in ps)), None)
            if bad is None:
                raise
            del protos[bad]
            unreadable.append(_failed(HostFailure(bad, exc.what), options))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_hosts(run: Run, tasks: list[HostTask], options: PodOptions, first: Iterable[Result], keep: list[int],
                fold_slices: bool = False) -> tuple[list[HostPart], list[HostFailure], EventTotals | None]:
    """Every kept host's part, in the order of the files (the steps agreed), from the ``first``
    results of ``tasks`` (and ``run`` to read a host again); the files left out; the parts' sums
    added up (the parts then hold none of their own), None when no part has op events."""
    fold = _Fold(keep, fold_slices)
    for i, result in _wanted(first, len(tasks), keep):
        fold.put(i, _failed(result, options) if isinstance(result, HostFailure) else result)
    left_out, parts = fold.left_out, fold.parts
    if not parts:
        raise InputError("none of the host files could be read" + (f": {left_out[0].reason}" if left_out else ""),
                         "capture again; the files may be truncated or corrupt")
    choice = choose_steps(merge_evidence([fold.evidence[i] for i in sorted(fold.evidence)]))
    again = [i for i in sorted(fold.choices) if fold.choices[i] != choice]
    if again:
        redo = [dataclasses.replace(tasks[i], choice=choice) for i in again]
        redone = dict(_wanted(run(redo), len(redo), list(range(len(redo)))))
        for k, i in enumerate(again):
            r = redone[k]
            if isinstance(r, HostFailure):
                raise InputError(r.reason if r.path in r.reason else f"{r.path}: {r.reason}")
            parts[i] = r
    return [parts[i] for i in sorted(parts)], left_out, fold.total(choice, again)


class _Fold:
    """The kept hosts' parts as they arrive, their sums added up in the order of the files while
    they agree on the steps (:class:`~hlo_doctor.opstats.totals.TotalsSum`): the command holds one
    sum, not every host's. A part that arrives early waits for those before it; from the first part
    whose own choice of steps differs, the parts are held whole until the steps are agreed."""

    def __init__(self, keep: list[int], fold_slices: bool = False) -> None:
        self.order, self.next = sorted(keep), 0
        self.fold_slices = fold_slices
        self.waiting: dict[int, HostPart | HostFailure] = {}
        self.parts: dict[int, HostPart] = {}
        self.left_out: list[HostFailure] = []
        self.evidence: dict[int, StepEvidence] = {}
        self.choices: dict[int, StepChoice] = {}
        self.sum, self.folded, self.folding = TotalsSum(fold_slices=fold_slices), 0, True
        """The sum of the first ``folded`` parts with op events (in the order of the files)."""
        self.choice: StepChoice | None = None
        """The steps of the parts in the sum."""

    def put(self, i: int, result: HostPart | HostFailure) -> None:
        if isinstance(result, HostPart) and result.totals is not None:
            self.evidence[i], self.choices[i] = result.totals.evidence, result.totals.choice
        self.waiting[i] = result
        while self.next < len(self.order) and self.order[self.next] in self.waiting:
            j = self.order[self.next]
            self.next += 1
            r = self.waiting.pop(j)
            if isinstance(r, HostFailure):
                self.left_out.append(r)
                continue
            if self.folding and r.totals is not None:
                if self.choice is not None and r.totals.choice != self.choice:
                    self.folding = False
                else:
                    self.choice = r.totals.choice
                    self.sum.add(r.totals)
                    self.folded += 1
                    r = dataclasses.replace(r, totals=None)
            self.parts[j] = r

    def total(self, choice: StepChoice, again: list[int]) -> EventTotals | None:
        """The sum of every part's totals under ``choice``, once the parts of ``again`` were read again."""
        if not self.choices:
            return None
        if self.folded and self.choice != choice:  # the sum is of the wrong steps: all again
            self.sum, self.folded = TotalsSum(fold_slices=self.fold_slices), 0
        with_totals = sorted(self.choices)
        for i in with_totals[self.folded:]:
            totals = self.parts[i].totals
            assert totals is not None
            self.sum.add(totals)
        return self.sum.result()


def _wanted(results: Iterable[Result], count: int, keep: list[int]) -> Iterator[Result]:
    """The results of the tasks of ``keep`` (indices of ``count`` tasks), as they come."""
    wanted, seen = set(keep), set()
    for i, result in results:
        if i in wanted:
            assert 0 <= i < count and i not in seen
            seen.add(i)
            yield i, result
    assert seen == wanted


def _failed(failure: HostFailure, options: PodOptions) -> HostFailure:
    """A host that failed: the command stops, naming it, unless it may be left out (a file that
    cannot be read, with ``skip_bad_hosts``)."""
    if failure.kind == "died":
        raise InputError(f"{failure.path}: {failure.reason}",
                         "the file may need more memory than a worker has; read it with --jobs 1, "
                         "or leave it out of the folder")
    if not options.skip_bad_hosts:
        raise InputError(failure.reason if failure.path in failure.reason else f"{failure.path}: {failure.reason}",
                         "capture it again, or pass --skip-bad-hosts to leave it out of the table "
                         "(the table then says so)")
    return failure


class CaptureReader:
    """Reads captures with :class:`PodOptions` for :func:`hlo_doctor.lint.load_context`: op stats and
    host dispatch spans from one pass over the host files."""

    def __init__(self, options: PodOptions) -> None:
        self.options = options
        self._dispatch: dict[str, tuple[HostDispatch, ...]] = {}
        self.left_out: list[tuple[str, str]] = []
        """(host file, why) of each host file left out of what was read (``skip_bad_hosts``)."""

    def opstats(self, path: Path) -> OpStats:
        """The op stats of ``path`` (:func:`read_capture`)."""
        stats, dispatch = read_capture(path, self.options, dispatch=True)
        if dispatch is not None:
            self._dispatch[str(path)] = dispatch
        self.left_out.extend(stats.hosts_left_out)
        return stats

    def host_dispatch(self, path: Path) -> tuple[HostDispatch, ...]:
        """Dispatch spans per program of the capture at ``path``."""
        if str(path) in self._dispatch:
            return self._dispatch[str(path)]
        return read_host_dispatch(find_xplanes(path))


__all__ = ["CaptureReader", "PodOptions", "Result", "read_capture"]
