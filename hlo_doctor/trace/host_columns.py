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

__all__ = ["HostLineRead", "read_host_line"]


class HostLineRead:
    """What one host line said: its compile events (before their callers are found)."""

    __slots__ = ("compiles",)

    def __init__(self, compiles: list[CompileEvent]) -> None:
        self.compiles = compiles


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
                   noise: tuple[str, ...], compile_re: re.Pattern[str], label: tuple[str, str]) -> HostLineRead | None:
    """The op events (when ``want_ops``, into ``cols``), step marks (into ``steps``) and compile
    events of one host line, as the message loop reads them; None where that loop must read it."""
    columns = getattr(line, "event_columns", None)
    if not COMPILED or columns is None:
        return None
    ts1000 = int(line.timestamp_ns) * 1000  # type: ignore[attr-defined]
    starts, durs, runs = array("d"), array("d"), array("q")
    mods, ops, pids = array("i"), array("i"), array("i")
    module_code, op_code, pid_code = cols.modules.code, cols.ops.code, cols.program_ids.code
    found: list[CompileEvent] = []
    marks: list[StepMark] = []
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
                sd: dict[str, object] = {} if name.startswith("$") else dict(own.get(i, ()))
                if sd:
                    op = sd.get("hlo_op")
                    if op is not None:
                        if want_ops:
                            pid = program_id_of(sd.get("program_id"))
                            run = sd.get("run_id")
                            starts.append((ts1000 + off) / 1000)
                            durs.append(dur / 1000)
                            runs.append(int(run) if run is not None else -1)  # type: ignore[call-overload]
                            mods.append(module_code(str(sd.get("hlo_module", ""))))
                            ops.append(op_code(str(op)))
                            pids.append(pid_code(pid if pid is not None else -1))
                        continue
                    if "step_num" in sd:
                        try:
                            num = int(sd["step_num"])  # type: ignore[call-overload]
                        except (TypeError, ValueError):
                            num = -1
                        marks.append(StepMark(host, name, num, (ts1000 + off) / 1000, dur / 1000))
                        continue
                if compile_work:
                    start = (ts1000 + off) / 1000
                    found.append(CompileEvent(
                        name=name, start_us=start / 1e3, duration_us=dur / 1000 / 1e3,
                        module=str(sd.get("hlo_module", sd.get("module", ""))), detail=label[0], thread=label[1],
                        program_id=program_id_of(sd.get("program_id"))))
            first += len(part.mids)
    except Unread:
        # Left to the message loop, whole: nothing of this line is kept (the op codes made stay unused).
        return None
    steps.extend(marks)
    if starts:
        cols.add(host, pname, np.frombuffer(mods, np.int32), np.frombuffer(pids, np.int32),
                 np.frombuffer(ops, np.int32), np.frombuffer(starts, np.float64),
                 np.frombuffer(durs, np.float64), np.frombuffer(runs, np.int64),
                 np.ones(len(starts), np.int32))
    return HostLineRead(found)
