"""TPU and GPU device planes as libtpu and CUPTI write them (the conventions xprof reads).

- Plane ``/device:TPU:N`` / ``/device:GPU:N``. With an ``XLA Ops`` line (TPU), its events are the
  ops; other lines (``Async XLA Ops``, ``XLA TraceMe``...) are not. Without one (GPU), every event
  that carries an ``hlo_op`` stat is an op (kernels and memcpys on ``Stream #N`` lines).
- An op's stats live on its event METADATA (``program_id``, ``symbol_id``, ...) or on the event
  (GPU: ``hlo_op``, ``hlo_module``, ``program_id``). Metadata is read by its id, never by its name:
  libtpu writes the same op text under every program that holds it.
- The metadata name is the op's HLO text and its display name the op name.
- ``device_offset_ps`` / ``device_duration_ps`` (the device's clock) win over the event's own offset
  and duration; an aggregated event counts ``num_occurrences`` runs.
- ``XLA Modules`` events are named ``module(program_id)``: the module that ran an op when neither
  the op nor the metadata plane says; the ``Steps`` line holds the device's steps.
- An op's cost per run, where the trace states it (``flops`` and ``bytes_accessed`` on TPU op
  metadata, or on a GPU event), is kept per (module, program id, op) for the roofline.
- Like xprof (``op_metrics_db_utils.cc``), an ``XLA Ops`` event whose metadata has ``symbol_id`` 0
  (the program's root, not an op) is left out, with a warning. An op event without a program id
  (which xprof also leaves out) is kept, counted without one, with a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from hlo_doctor.trace.columns import OpColumns, narrowest, unique_inverse
from hlo_doctor.trace.conventions import split_module, split_op_text
from hlo_doctor.trace.cwire import COMPILED, enclosing_spans
from hlo_doctor.trace.device_lines import Line as _Line
from hlo_doctor.trace.device_lines import scan as _scan
from hlo_doctor.trace.model import StepMark
from hlo_doctor.trace.wire import Unread
from hlo_doctor.trace.xspace import XPlane, program_id_of, stat_names, stat_value

# Device-plane lines that are not op events (xprof counts only XLA Ops on TPU).
_NOT_OP_LINES = frozenset({"XLA Modules", "Steps", "Framework Ops", "Framework Name Scope", "Source code",
                           "Async XLA Ops", "XLA TraceMe"})
# Event stats that say which op ran (read per event; the device clock stats are read apart).
_OP_STATS = frozenset({"hlo_op", "hlo_module", "program_id", "run_id", "long_name", "group_id", "flops",
                       "bytes_accessed"})
_NO_ID = -1
_ABSENT = object()


@dataclass(frozen=True, slots=True)
class _Op:
    op: str
    text: str
    module: str
    program_id: int
    flops: float | None = None
    """FLOPs of one run, when the trace states them."""
    bytes_accessed: float | None = None


def _cost(value: object) -> float | None:
    """A ``flops`` / ``bytes_accessed`` stat as a number; None when absent or not a count."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return float(value)


class DevicePlaneReader:
    """Reads the op events and steps of one device plane into shared columns."""

    def __init__(self, plane: XPlane, host: str, module_names: dict[int, str], cols: OpColumns,
                 expressions: dict[tuple[str, int, str], str], warnings: list[str]) -> None:
        self.plane, self.host, self.cols = plane, host, cols
        self.module_names, self.expressions, self.warnings = module_names, expressions, warnings
        self.name = plane.name
        self.snames = stat_names(plane)
        by_name = {name: sid for sid, name in self.snames.items()}
        self.off_id = by_name.get("device_offset_ps", -1)
        self.dur_id = by_name.get("device_duration_ps", -1)
        self.op_ids = {sid: name for sid, name in self.snames.items() if name in _OP_STATS}
        self.meta = {entry.key: entry.value for entry in plane.event_metadata}
        self._meta_stats: dict[int, dict[str, object]] = {}
        self._warned: set[tuple[str, object]] = set()
        self._prefetched: Future[list[_Line | None]] | None = None
        self.costs: dict[tuple[str, int, str], tuple[float | None, float | None]] = {}
        """(module, program id, op) -> (FLOPs, bytes accessed) of one run, as the trace states them."""

    def _warn(self, key: tuple[str, object], text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warnings.append(f"{self.host} {self.name}: {text}")

    def _stats_of(self, mid: int) -> dict[str, object]:
        stats = self._meta_stats.get(mid)
        if stats is None:
            meta = self.meta.get(mid)
            stats = {} if meta is None else {
                self.snames[s.metadata_id]: stat_value(s, self.snames)
                for s in meta.stats if s.metadata_id in self.snames}
            self._meta_stats[mid] = stats
        return stats

    def _name_of(self, mid: int) -> tuple[str, str]:
        meta = self.meta.get(mid)
        return (meta.name, meta.display_name) if meta is not None else ("", "")

    def _pid(self, value: object, where: str) -> int:
        if value is None:
            return _NO_ID
        pid = program_id_of(value)
        if pid is None:
            self._warn(("pid", value), f"{where} has program_id {value!r}, not a valid id: counted without one")
            return _NO_ID
        return pid

    def _op(self, mid: int, own: tuple[tuple[str, object], ...], op_line: bool) -> _Op | None:
        """What an event with this metadata (and own stats) ran; None when it is not an op."""
        stats = {**self._stats_of(mid), **dict(own)}
        name, display = self._name_of(mid)
        if op_line and stats.get("symbol_id") in (0, "0"):
            self._warn(("root", mid), f"events of metadata {mid} ({display or name[:60]}) have symbol_id 0 "
                                      "(a program's root, not an op): left out, as xprof does")
            return None
        op_value = stats.get("hlo_op")
        if op_value is None:
            if not op_line:
                return None
            if not name and not display:
                why = "is not in the plane" if mid not in self.meta else "has no name"
                self._warn(("meta", mid), f"event metadata {mid} {why}: its op is named <metadata {mid}>")
                op_value = f"<metadata {mid}>"
            else:
                op_value = display or name
        op, text = split_op_text(str(op_value))
        if not text:
            text = split_op_text(name)[1] or str(stats.get("long_name", "") or "")
        pid = self._pid(stats.get("program_id"), f"op {op}")
        module, suffix = split_module(str(stats.get("hlo_module", "") or ""))
        if pid == _NO_ID and suffix is not None:
            pid = self._pid(suffix, f"module {module}")
        return _Op(op, text, module or self.module_names.get(pid, ""), pid,
                   _cost(stats.get("flops")), _cost(stats.get("bytes_accessed")))

    def _op_lines(self) -> tuple[list[object], bool]:
        """The plane's op lines, and whether they are ``XLA Ops`` lines (TPU)."""
        lines = list(self.plane.lines)
        xla_ops = [ln for ln in lines if ln.name == "XLA Ops"]
        return (xla_ops or [ln for ln in lines if ln.name not in _NOT_OP_LINES]), bool(xla_ops)

    def prefetch(self, submit: Callable[..., Future[list[_Line | None]]]) -> None:
        """Decode the plane's op lines in the background (``submit``: a one-thread executor's): the
        compiled reader decodes without the interpreter's lock, so the next plane's events are read
        while this process works on the one before. :meth:`read` takes them as they come."""
        if COMPILED:
            lines, _ = self._op_lines()
            self._prefetched = submit(self._scan_all, lines)

    def _scan_all(self, lines: list[object]) -> list[_Line | None]:
        """Each line's columns from its wire bytes; None for a line the protobuf runtime must read
        (it is then read in the thread that asks, as before)."""
        out: list[_Line | None] = []
        for ln in lines:
            try:
                out.append(_scan(ln, self.off_id, self.dur_id, self.op_ids, self.snames, wire_only=True))
            except Unread:
                out.append(None)
        return out

    def read(self, steps: list[StepMark]) -> int:
        """Add the plane's op events to the columns and its device steps to ``steps``; events added."""
        lines = list(self.plane.lines)
        op_lines, xla_ops = self._op_lines()
        spans = self._module_spans([ln for ln in lines if ln.name == "XLA Modules"])
        for ln in lines:
            if ln.name == "Steps":
                self._steps(ln, steps)
        before = len(self.cols)
        scanned: list[_Line | None] = [None] * len(op_lines)
        if self._prefetched is not None:
            scanned, self._prefetched = self._prefetched.result(), None
        for ln, ev in zip(op_lines, scanned, strict=True):
            self._op_line(ln, xla_ops, spans, ev)
        return len(self.cols) - before

    def _steps(self, line: object, steps: list[StepMark]) -> None:
        ev = _scan(line, self.off_id, self.dur_id, self.op_ids, self.snames)
        groups = ev.own.last("group_id", len(ev.mids))
        if groups is not None:
            # Integer stats as rows (the compiled reader): each event's group_id, else its metadata's
            # (else its name) per distinct metadata, with no Python work per event but the mark.
            has, own_group = groups
            uniq, which = unique_inverse(ev.mids)
            names, nums = self._step_marks(uniq.tolist())
            if -(1 << 63) <= min(nums, default=0) and max(nums, default=0) < (1 << 63):
                num = np.where(has, own_group, np.asarray(nums, np.int64)[which])
                host, device = self.host, self.name
                steps.extend(StepMark(host, names[k], n, start, duration, device=device) for k, n, start, duration in zip(
                    which.tolist(), num.tolist(), ev.start_ns.tolist(), ev.duration_ns.tolist(), strict=True))
                return
        named: dict[tuple[int, tuple[tuple[str, object], ...]], tuple[str, int]] = {}  # per distinct event kind
        for i, (mid, start, duration) in enumerate(zip(ev.mids.tolist(), ev.start_ns.tolist(),
                                                         ev.duration_ns.tolist(), strict=True)):
            key = (mid, ev.own.get(i, ()))
            known = named.get(key)
            if known is None:
                name = self._name_of(mid)[0]
                group = dict(key[1]).get("group_id", self._stats_of(mid).get("group_id"))
                known = named[key] = (name, self._step_num(group, name))
            steps.append(StepMark(self.host, known[0], known[1], start, duration, device=self.name))

    def _step_marks(self, mids: list[int]) -> tuple[list[str], list[int]]:
        """Each step metadata's name and number (:meth:`_step_num` of its ``group_id`` stat, else of
        its name): what ``_stats_of(mid).get("group_id")`` reads, without a dict per metadata (a
        device writes one metadata per step)."""
        names: list[str] = []
        nums: list[int] = []
        snames, meta_of, step_num = self.snames, self.meta.get, self._step_num
        group_ids = {sid for sid, name in snames.items() if name == "group_id"}
        for mid in mids:
            meta = meta_of(mid)
            if meta is None:
                names.append("")
                nums.append(step_num(None, ""))
                continue
            group: object = None
            for st in meta.stats:
                if st.metadata_id in group_ids:
                    group = stat_value(st, snames)  # the last one wins, as in the dict of them
            names.append(meta.name)
            nums.append(step_num(group, meta.name))
        return names, nums

    @staticmethod
    def _step_num(group: object, name: str) -> int:
        """A step's number: its ``group_id`` (else its name) as an integer, -1 where it is none."""
        try:
            return int(group if group is not None else name)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return -1

    def _module_spans(self, lines: list[object]) -> tuple[np.ndarray, np.ndarray, list[tuple[str, int]]]:
        """Starts, ends and (module, program id) of the ``XLA Modules`` events, sorted by start."""
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        what: list[tuple[str, int]] = []
        for line in lines:
            ev = _scan(line, self.off_id, self.dur_id, self.op_ids, self.snames)
            # Once per (metadata, program id): the only own stat a module run is read by (its run_id varies).
            runs: dict[tuple[int, object], tuple[str, int]] = {}
            pids = ev.own.last("program_id", len(ev.mids))
            if pids is not None and len(ev.mids):
                # Integer stats as rows (the compiled reader): the distinct (metadata, program id)
                # pairs in the order they first come, each read once.
                has, held_pid = pids
                keys = np.stack([ev.mids, has.astype(np.int64), np.where(has, held_pid, 0)], axis=1)
                uniq, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
                order = np.argsort(first, kind="stable")
                made: list[tuple[str, int]] = [("", 0)] * len(uniq)
                for u in order.tolist():
                    mid, held, value = uniq[u].tolist()
                    made[u] = self._module_run(mid, value if held else _ABSENT)
                what.extend(made[u] for u in inverse.reshape(-1).tolist())
                starts.append(ev.start_ns)
                ends.append(ev.start_ns + ev.duration_ns)
                continue
            for i, mid in enumerate(ev.mids.tolist()):
                pid: object = _ABSENT
                for k, v in ev.own.get(i, ()):
                    if k == "program_id":
                        pid = v  # the last one wins, as in a dict of them
                known = runs.get((mid, pid))
                if known is None:
                    known = runs[(mid, pid)] = self._module_run(mid, pid)
                what.append(known)
            starts.append(ev.start_ns)
            ends.append(ev.start_ns + ev.duration_ns)
        if not what:
            return np.zeros(0), np.zeros(0), []
        s, e = np.concatenate(starts), np.concatenate(ends)
        order = np.argsort(s, kind="stable")
        return s[order], e[order], [what[i] for i in order.tolist()]

    def _module_run(self, mid: int, own_pid: object) -> tuple[str, int]:
        """(module, program id) of an ``XLA Modules`` event of metadata ``mid`` whose own stats hold
        ``own_pid`` as ``program_id`` (``_ABSENT``: none)."""
        stats = self._stats_of(mid)
        if own_pid is not _ABSENT:
            stats = {**stats, "program_id": own_pid}
        name = self._name_of(mid)[0]
        module, suffix = name, None
        if name.endswith(")") and "(" in name:
            module, _, rest = name[:-1].rpartition("(")
            suffix = program_id_of(rest)
            if suffix is None:
                module = name
        pid = self._pid(stats.get("program_id"), f"module {name}")
        return module, pid if pid != _NO_ID else (suffix if suffix is not None else _NO_ID)

    def _op_line(self, line: object, op_line: bool,
                 spans: tuple[np.ndarray, np.ndarray, list[tuple[str, int]]], ev: _Line | None = None) -> None:
        if ev is None:
            ev = _scan(line, self.off_id, self.dur_id, self.op_ids, self.snames)
        n = len(ev.mids)
        if not n:
            return
        # One _Op per distinct (metadata, own stats): a few hundred for millions of events.
        uniq, which = unique_inverse(ev.mids)
        infos: list[_Op | None] = [self._op(mid, (), op_line) for mid in uniq.tolist()]
        index: dict[object, int] = {}
        for i, own in ev.own.items():
            key = (int(ev.mids[i]), own)
            k = index.get(key)
            if k is None:
                k = index[key] = len(infos)
                infos.append(self._op(key[0], own, op_line))
            which[i] = k
        kept = np.fromiter((info is not None for info in infos), bool, len(infos))
        keep = None if bool(kept.all()) else kept[which]  # None: every event (the usual case, no mask)
        span_starts, span_ends, span_what = spans
        # Each event's module run (-1: none), made in one array: millions of events, so no temporaries.
        run = enclosing_spans(span_starts, span_ends, ev.start_ns)
        # Module and program id codes per event: from the op, else from the enclosing module run: the
        # pair (op, run + 1) where the op needs its run, else (op, 0), as one integer.
        needs = np.fromiter(
            ((o is not None and (not o.module or o.program_id == _NO_ID)) for o in infos), bool, len(infos))
        width = len(span_what) + 1
        if not needs.any():  # every op names its module and program: (op, 0), in the order of the ops
            if len(infos) == len(uniq):
                # No event's own stats made an op of their own: every op code is some event's already.
                uniq, inverse = np.arange(len(infos), dtype=np.int64), which
            else:
                uniq, inverse = unique_inverse(which)
            uniq = uniq.astype(np.int64) * width
        else:
            pairs = which.astype(np.int64)
            pairs *= np.int64(width)
            if needs.all():
                pairs += run
                pairs += 1
            else:
                need_span = needs[which]
                np.add(pairs, run, out=pairs, where=need_span)
                np.add(pairs, 1, out=pairs, where=need_span)
                del need_span
            uniq, inverse = unique_inverse(pairs, scratch=True)
            del pairs
        codes = np.empty((len(uniq), 3), np.int32)
        no_pid = np.zeros(len(uniq), bool)
        for u, pair in enumerate(uniq.tolist()):
            k, s = divmod(pair, len(span_what) + 1)
            info, span = infos[k], span_what[s - 1] if s > 0 else None
            codes[u] = self._codes(info, span)
            no_pid[u] = info is not None and info.program_id == _NO_ID and (span is None or span[1] == _NO_ID)
        unkeyed = no_pid[inverse] if no_pid.any() else None
        if unkeyed is not None and keep is not None:
            unkeyed &= keep
        if unkeyed is not None and unkeyed.any():
            # xprof keys ops by program id and leaves these out of hlo_stats; they are kept, and said.
            self._warn(("no pid", line.name), f"{int(ev.occurrences[unkeyed].sum())} op events on "  # type: ignore[attr-defined]
                                               f"{line.name} have no program id (xprof's hlo_stats "  # type: ignore[attr-defined]
                                               "leaves them out): counted without one")
        del which
        # The codes in their column's type already (int16 where they fit): each column below is then
        # one gather, not a gather and a narrowing copy.
        codes = narrowest(codes, np.int16)
        if keep is None or bool(keep.all()):  # the usual case: no copy of the columns
            inverse_kept, start_ns, duration_ns, occurrences = inverse, ev.start_ns, ev.duration_ns, ev.occurrences
        else:
            inverse_kept, start_ns, duration_ns, occurrences = (
                inverse[keep], ev.start_ns[keep], ev.duration_ns[keep], ev.occurrences[keep])
            run = run[keep]
        del inverse
        self.cols.add(self.host, self.name, codes[inverse_kept, 0], codes[inverse_kept, 1], codes[inverse_kept, 2],
                      start_ns, duration_ns, run, occurrences)

    def _codes(self, info: _Op | None, span: tuple[str, int] | None) -> tuple[int, int, int]:
        """Codes of (module, program id, op) of an op, completed from its enclosing module run."""
        if info is None:
            return (0, 0, 0)
        module, pid = info.module, info.program_id
        if span is not None:
            pid = pid if pid != _NO_ID else span[1]
            module = module or self.module_names.get(pid, "") or span[0]
        cols = self.cols
        if info.text:
            self.expressions.setdefault((module, pid, info.op), info.text)
        if info.flops is not None or info.bytes_accessed is not None:
            self.costs.setdefault((module, pid, info.op), (info.flops, info.bytes_accessed))
        return cols.modules.code(module), cols.program_ids.code(pid), cols.ops.code(info.op)
