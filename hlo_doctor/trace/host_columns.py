"""A host plane's line read from its event columns (the compiled reader), not event by event.

A host plane holds millions of events: the Python tracer's frames, the runtime's TraceMe spans, and
on XLA:CPU the op events. :func:`~hlo_doctor.trace.conventions.read_host_plane` reads what a few of
them say (the op events, the step marks, the compile work). Here the line's events come as columns
(:func:`~hlo_doctor.trace.cwire.line_columns`: metadata ids, offsets, durations and the wanted
stats as rows), each distinct metadata is classed once by its name, and only the events that can
say something (those with a wanted stat, and those named as compile work) are looked at one by one,
in line order, by the same rules and with the same arithmetic as the message loop (times from the
picosecond integers, exactly). A line the compiled reader leaves to the protobuf runtime is read by
the message loop instead (None).
"""

from __future__ import annotations

import re
from array import array

import numpy as np

from hlo_doctor.trace.columns import OpColumns, unique_inverse
from hlo_doctor.trace.cwire import COMPILED
from hlo_doctor.trace.model import CompileEvent, StepMark
from hlo_doctor.trace.wire import Unread
from hlo_doctor.trace.xspace import program_id_of

__all__ = ["HostLineSink", "read_host_line"]


class HostLineSink:
    """What one host line's events say, taken one event at a time (by either read of the line): its
    op events (when ``want_ops``), step marks and compile events, in the line's order."""

    def __init__(self, timestamp_ns: int, want_ops: bool, host: str, pname: str, cols: OpColumns,
                 label: tuple[str, str]) -> None:
        self.ts1000, self.want_ops, self.host, self.pname, self.cols, self.label = (
            int(timestamp_ns) * 1000, want_ops, host, pname, cols, label)
        # Columns of the line's op events (array.array: no Python object kept per event).
        self.starts, self.durs, self.runs = array("d"), array("d"), array("q")
        self.mods, self.ops, self.pids = array("i"), array("i"), array("i")
        self.marks: list[StepMark] = []
        self.compiles: list[CompileEvent] = []

    def take(self, name: str, sd: dict[str, object], offset_ps: int, duration_ps: int, compile_work: bool) -> None:
        """One event: its metadata's name, its own wanted stats (``sd``), its picosecond offset and
        duration (times are worked out from them as integers: ``(timestamp_ns * 1000 + offset_ps) /
        1000``), whether its name is compile work."""
        if sd:
            op = sd.get("hlo_op")
            if op is not None:
                if self.want_ops:
                    cols, pid, run = self.cols, program_id_of(sd.get("program_id")), sd.get("run_id")
                    self.starts.append((self.ts1000 + offset_ps) / 1000)
                    self.durs.append(duration_ps / 1000)
                    self.runs.append(int(run) if run is not None else -1)  # type: ignore[call-overload]
                    self.mods.append(cols.modules.code(str(sd.get("hlo_module", ""))))
                    self.ops.append(cols.ops.code(str(op)))
                    self.pids.append(cols.program_ids.code(pid if pid is not None else -1))
                return
            if "step_num" in sd:
                try:
                    num = int(sd["step_num"])  # type: ignore[call-overload]
                except (TypeError, ValueError):
                    num = -1
                self.marks.append(StepMark(self.host, name, num, (self.ts1000 + offset_ps) / 1000, duration_ps / 1000))
                return
        if compile_work:
            start = (self.ts1000 + offset_ps) / 1000
            self.compiles.append(CompileEvent(
                name=name, start_us=start / 1e3, duration_us=duration_ps / 1000 / 1e3,
                module=str(sd.get("hlo_module", sd.get("module", ""))), detail=self.label[0], thread=self.label[1],
                program_id=program_id_of(sd.get("program_id"))))

    def finish(self, steps: list[StepMark]) -> list[CompileEvent]:
        """Add the op events to the columns and the marks to ``steps``; the compile events."""
        steps.extend(self.marks)
        if self.starts:
            self.cols.add(self.host, self.pname, np.frombuffer(self.mods, np.int32), np.frombuffer(self.pids, np.int32),
                          np.frombuffer(self.ops, np.int32), np.frombuffer(self.starts, np.float64),
                          np.frombuffer(self.durs, np.float64), np.frombuffer(self.runs, np.int64),
                          np.ones(len(self.starts), np.int32))
        return self.compiles


def _class(classes: dict[int, tuple[str, bool, bool]], names: dict[int, str], mid: int, noise: tuple[str, ...],
           compile_re: re.Pattern[str]) -> tuple[str, bool, bool]:
    """A metadata's name, whether it is noise, whether it names compile work (worked out once)."""
    got = classes.get(mid)
    if got is None:
        name = names.get(mid, "")
        got = classes[mid] = (name, name.startswith(noise), bool(compile_re.search(name)))
    return got


def read_host_line(line: object, names: dict[int, str], snames: dict[int, str], wanted: dict[int, str],
                   want_ops: bool, host: str, pname: str, cols: OpColumns, steps: list[StepMark],
                   noise: tuple[str, ...], compile_re: re.Pattern[str], label: tuple[str, str]) -> list[CompileEvent] | None:
    """The op events (when ``want_ops``, into ``cols``), step marks (into ``steps``) and compile
    events of one host line, as the message loop reads them; None where that loop must read it."""
    columns = getattr(line, "event_columns", None)
    if not COMPILED or columns is None:
        return None
    sink = HostLineSink(line.timestamp_ns, want_ops, host, pname, cols, label)  # type: ignore[attr-defined]
    classes: dict[int, tuple[str, bool, bool]] = {}  # metadata id -> (name, noise, compile work)
    first = 0
    try:
        for part in columns(-1, -1, wanted, snames):  # a chunk of the line at a time, in order
            uniq, which = unique_inverse(part.mids)
            kinds = [_class(classes, names, mid, noise, compile_re) for mid in uniq.tolist()]
            noisy = np.fromiter((k[1] for k in kinds), bool, len(kinds))
            compiling = np.fromiter((k[2] for k in kinds), bool, len(kinds))
            # Events that can say something, in line order: a wanted stat of their own, or a compile's name.
            picked = compiling[which]
            own = part.own
            if len(own):
                picked[np.fromiter(own, np.int64, len(own)) - first] = True
            picked &= ~noisy[which]
            events = np.flatnonzero(picked)
            for i, k, off, dur in zip((events + first).tolist(), which[events].tolist(),
                                      part.offsets_ps[events].tolist(), part.durations_ps[events].tolist(), strict=True):
                name, _, compile_work = kinds[k]
                sink.take(name, {} if name.startswith("$") else dict(own.get(i, ())), off, dur, compile_work)
            first += len(part.mids)
    except Unread:
        # Left to the message loop, whole: nothing of this line is kept (the op codes made stay unused).
        return None
    return sink.finish(steps)
