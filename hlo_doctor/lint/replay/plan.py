"""From a fix's findings to the two sides a replay times: which captured programs, changed how.

Each finding a replay can stand for names its change:

- HD003 (a standalone convert program) and HD004 (a reduction reading the widened copy the
  program made): side A runs the convert program, then its consumer on the convert's output; side
  B runs only the consumer, taking the narrow tensor: widened inside, where XLA fuses the convert
  into its readers (HD003 alone: "move it inside"), or, with HD004's finding, its argmax reading the
  narrow tensor itself ("reduce the bf16 tensor": what ``bf16-greedy-sampler`` does).
- HD002 (a copy of a parameter into the output): side B returns the parameter itself, donated
  (``input_output_alias``), so no copy runs; both sides carry that output into the next run, as a
  decode loop carries its buffers.
- HD011 (an order-keeping map before an argmax, also one fused into its producer such as the LM
  head's matmul): side B feeds the selection the value before the map.

Every program is measured whole, so what fusion and overlap change comes with the number. A
finding of another rule stays a model; the plan says which.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hlo_doctor.core.model import Finding
from hlo_doctor.hlo import HloInstruction, HloModule
from hlo_doctor.lint.context import Context
from hlo_doctor.lint.host_cost import PerStepProgram, per_step_convert_programs
from hlo_doctor.lint.replay.spec import Call, Parameter

REPLAYED = frozenset({"HD002", "HD003", "HD004", "HD011"})
"""The rules whose change a replay makes."""


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """The programs of both sides, the findings they stand for, and those left to the model."""

    a: tuple[Call, ...]
    b: tuple[Call, ...]
    modules: tuple[HloModule, ...]
    """The captured modules side A runs (their protos go beside the spec)."""
    covered: tuple[Finding, ...]
    modelled: tuple[Finding, ...]
    capture_us: float
    """Side A's programs' time per step in the capture (their ops' device time)."""


def module_key(m: HloModule) -> str:
    """``name(program id)``: how the capture names one program."""
    return m.name if m.program_id is None else f"{m.name}({m.program_id})"


def proto_name(m: HloModule) -> str:
    """The file name of ``m``'s proto beside a spec (names from a capture are never paths here)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", module_key(m)).lstrip(".") + ".pb"


def _find(ctx: Context, f: Finding) -> HloModule | None:
    return next((m for m in ctx.modules if m.name == f.module and (f.program_id is None or m.program_id == f.program_id)),
                None)


def runs_per_step(ctx: Context, m: HloModule) -> float:
    """How often ``m`` runs per step on one device (its most frequent op's occurrences)."""
    rows = ctx.module_rows(m)
    if rows is None or not len(rows) or not ctx.num_steps:
        return 0.0
    devices = rows["devices"].fillna(1).clip(lower=1) if "devices" in rows else 1
    return float((rows["occurrences"].fillna(0) / devices).max()) / ctx.num_steps


def _capture_us(ctx: Context, m: HloModule) -> float:
    """``m``'s time in the capture's typical step: its ops' mean time per step times
    :func:`median_share`."""
    rows = ctx.module_rows(m)
    mean = float(rows["time_per_step_us"].fillna(0).sum()) if rows is not None and len(rows) else 0.0
    return mean * median_share(ctx, m)


def median_share(ctx: Context, m: HloModule) -> float:
    """``m``'s median time per traced step over its mean (1.0 where the capture keeps no step's own
    times or ``m`` does not run in most steps). On a loaded machine a preempted thread's op can take
    20x its time in one step: that moves the mean the op stats divide out, not the median, and the
    median is what an alternated timing reports (the replay's pairs, verify's rounds, a direct A/B)."""
    ps = ctx.per_step
    if ps is None or not len(ps) or "step" not in ps or "time_us" not in ps:
        return 1.0
    mine = ps[ps["module"] == m.name]
    if m.program_id is not None and "program_id" in mine:
        with_id = mine[mine["program_id"] == m.program_id]
        if len(with_id):
            mine = with_id
    steps = sorted(set(ps["step"].tolist()))
    by_step = mine.groupby("step")["time_us"].sum()
    times = [float(by_step.get(s, 0.0)) for s in steps]
    mean = sum(times) / len(times) if times else 0.0
    median = statistics.median(times) if times else 0.0
    return median / mean if mean > 0 and median > 0 else 1.0


class _Builder:
    """Side A and side B as they grow, one module at most once on each."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.a: list[tuple[HloModule, dict[int, tuple[int, int]]]] = []
        self.b: dict[str, dict[str, object]] = {}
        self.b_order: list[HloModule] = []
        self.dropped: set[str] = set()
        self.eager: dict[str, str] = {}

    def index(self, m: HloModule) -> int:
        for i, (have, _) in enumerate(self.a):
            if have is m:
                return i
        self.a.append((m, {}))
        return len(self.a) - 1

    def edit(self, m: HloModule) -> dict[str, object]:
        self.index(m)
        key = module_key(m)
        if key not in self.b:
            self.b[key] = {"narrow": {}, "narrow_reads": set(), "alias": {}, "drop_maps": False}
            self.b_order.append(m)
        return self.b[key]

    def calls(self) -> tuple[tuple[Call, ...], tuple[Call, ...]]:
        a_calls: list[Call] = []
        a_index = {module_key(m): i for i, (m, _) in enumerate(self.a)}
        for m, feeds in self.a:
            a_calls.append(replace(_call(self.ctx, m, feeds), eager_astype=self.eager.get(module_key(m), "")))
        b_modules = [m for m, _ in self.a if module_key(m) not in self.dropped]
        b_index = {module_key(m): i for i, m in enumerate(b_modules)}
        b_calls: list[Call] = []
        for m in b_modules:
            feeds = dict(self.a[a_index[module_key(m)]][1])
            # A feed from a dropped program becomes random input (the narrow tensor it was made from).
            remapped = {p: (b_index[module_key(self.a[src][0])], out) for p, (src, out) in feeds.items()
                        if module_key(self.a[src][0]) in b_index}
            edits = self.b.get(module_key(m), {"narrow": {}, "alias": {}, "drop_maps": False})
            # A donated parameter is gone after each run: unless another program makes it anew each
            # iteration, the run carries its own output (the aliased buffer) into the next run.
            for number, outs in edits["alias"].items():  # type: ignore[attr-defined]
                if number not in remapped or remapped[number][0] == b_index[module_key(m)]:
                    remapped[number] = (b_index[module_key(m)], outs[0])
            b_calls.append(_call(self.ctx, m, remapped, edits))
        return tuple(a_calls), tuple(b_calls)


def _call(ctx: Context, m: HloModule, feeds: dict[int, tuple[int, int]],
          edits: dict[str, object] | None = None) -> Call:
    params = sorted(m.entry.parameters, key=lambda p: p.parameter_number or 0)
    parameters = tuple(Parameter(p.shape.dtype, tuple(p.shape.dims), feeds.get(p.parameter_number or 0))
                       for p in params)
    edits = edits or {}
    narrow: dict[int, str] = edits.get("narrow", {})  # type: ignore[assignment]
    alias: dict[int, tuple[int, ...]] = edits.get("alias", {})  # type: ignore[assignment]
    return Call(module=module_key(m), proto=proto_name(m),
                parameters=parameters, runs=max(1, round(runs_per_step(ctx, m))),
                narrow=tuple(sorted(narrow.items())), alias=tuple(sorted(alias.items())),
                narrow_reads=tuple(sorted(edits.get("narrow_reads", ()))),  # type: ignore[call-overload]
                drop_maps=bool(edits.get("drop_maps", False)))


def plan(ctx: Context, findings: Sequence[Finding]) -> ReplayPlan | str:
    """The replay of ``findings`` (one fix's), or why there is none (one line)."""
    b = _Builder(ctx)
    covered: list[Finding] = []
    converts = {module_key(p.prog.module): p for p in per_step_convert_programs(ctx)}
    # The convert programs first: side A runs them before the consumers that take their results.
    for f in sorted(findings, key=lambda f: f.code not in ("HD003", "HD004")):
        m = _find(ctx, f) if f.code in REPLAYED else None
        if m is None:
            continue
        if f.code in ("HD003", "HD004"):
            prog = converts.get(module_key(m)) if f.code == "HD003" else _producer(ctx, m, converts.values())
            if prog is None:
                continue
            conv = prog.prog.module
            src = b.index(conv)
            b.dropped.add(module_key(conv))
            # It ran as an eager astype each step: replayed through jax's dispatch, as it ran.
            b.eager[module_key(conv)] = prog.prog.shape.dtype
            for consumer, number in _consumers(ctx, conv, prog.prog.shape.dtype, tuple(prog.prog.shape.dims)):
                i = b.index(consumer)
                b.a[i][1][number] = (src, 0)
                b.edit(consumer)["narrow"][number] = prog.prog.narrow  # type: ignore[index]
                if any(g.code == "HD004" and g.module == consumer.name for g in findings):
                    # HD004's change: the argmax reads the narrow tensor itself.
                    b.edit(consumer)["narrow_reads"].add(number)  # type: ignore[attr-defined]
        elif f.code == "HD002":
            extra = dict(f.extra)
            param, outputs = extra.get("parameter"), extra.get("output_indices")
            if not isinstance(param, int) or not outputs:
                continue
            number = param
            outs = tuple(int(o) for o in outputs)  # type: ignore[attr-defined]
            i = b.index(m)
            b.a[i][1].setdefault(number, (i, outs[0]))  # unless made by another program, carried
            b.edit(m)["alias"][number] = outs  # type: ignore[index]
        else:
            b.edit(m)["drop_maps"] = True
        covered.append(f)
    if not covered:
        return "no finding of this fix is one a replay can make (" + ", ".join(sorted({f.code for f in findings})) + ")"
    bad = [module_key(m) for m, _ in b.a for p in m.entry.parameters if p.shape.is_tuple]
    if bad:
        return f"{bad[0]} takes a tuple parameter, which the replay cannot make"
    loop = next(((m, i) for m, _ in b.a for i in m.instructions() if _data_dependent_loop(i)), None)
    if loop is not None:
        # Checked before anything compiles: such a program (a generate loop run until its tokens
        # stop) cost minutes to compile twice, then ran another trip count than the capture's.
        return (f"the replay does not stand for the capture: {module_key(loop[0])} runs a loop ({loop[1].name}) "
                "whose trip count its inputs decide (XLA's optimized HLO states none), and the replay's inputs "
                "are random values and zeros, not the capture's")
    a_calls, b_calls = b.calls()
    # A finding on a replayed program is measured with it (the whole program runs on both sides).
    modelled = [f for f in findings if f not in covered and not any(
        f.module == m.name and (f.program_id is None or f.program_id == m.program_id) for m, _ in b.a)]
    covered += [f for f in findings if f not in covered and f not in modelled]
    return ReplayPlan(a=a_calls, b=b_calls, modules=tuple(m for m, _ in b.a), covered=tuple(covered),
                      modelled=tuple(modelled), capture_us=sum(_capture_us(ctx, m) for m, _ in b.a))


def _data_dependent_loop(inst: HloInstruction) -> bool:
    """A ``while`` whose trip count XLA could not fix at compile time: its optimized HLO states a
    ``known_trip_count`` for a loop it can count (a scan, a ``fori_loop`` of constant bounds)."""
    return inst.opcode == "while" and "known_trip_count" not in inst.attribute("backend_config")


def _producer(ctx: Context, m: HloModule, converts: Iterable[PerStepProgram]) -> PerStepProgram | None:
    """The per-step convert program whose result one of ``m``'s parameters takes."""
    for p in converts:
        prog = p.prog
        if any(c is m for c, _ in _consumers(ctx, prog.module, prog.shape.dtype, tuple(prog.shape.dims))):
            return p
    return None


def _consumers(ctx: Context, conv: HloModule, dtype: str, dims: tuple[int, ...]) -> list[tuple[HloModule, int]]:
    """(module, parameter number) for each per-step program with a parameter of the convert's result."""
    out = []
    for m in ctx.modules:
        if m is conv or runs_per_step(ctx, m) < 0.5:
            continue
        for p in m.entry.parameters:
            if p.shape.dtype == dtype and tuple(p.shape.dims) == dims and not p.shape.is_tuple:
                out.append((m, p.parameter_number or 0))
                break
    return out


def capture_protos(ctx: Context, p: ReplayPlan) -> dict[str, bytes] | str:
    """Each of ``p``'s modules' ``HloModuleProto`` from the capture's xplane, by its file name beside a
    spec (:func:`proto_name`); the one-line reason where the capture cannot give them."""
    from hlo_doctor.hlo.proto import module_proto_bytes
    from hlo_doctor.trace.read import find_xplanes, read_module_protos

    try:
        found = read_module_protos(find_xplanes(Path(ctx.origin))[0])
    except Exception as exc:  # noqa: BLE001 - a capture that cannot be read again: no replay, said why
        return f"the capture's HLO protos could not be read: {exc}"
    out: dict[str, bytes] = {}
    for m in p.modules:
        proto = next((x for x in found if x.name == m.name and x.program_id == m.program_id), None)
        if proto is None:
            return f"the capture holds no HLO proto of {module_key(m)}"
        out[proto_name(m)] = module_proto_bytes(proto.hlo_proto)
    return out
