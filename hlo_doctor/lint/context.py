"""What a rule sees: :class:`Context` (HLO modules, op stats, compile events, source tree).

How a finding gets its time: a rule finds instructions in the HLO, then :meth:`Context.finding`
joins the entry-level op that holds them (a fused instruction is timed through its fusion) to the
op-stats rows by (module, program id, op name). Without op stats a finding carries no time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.hlo import HloInstruction, HloModule, analysis
from hlo_doctor.hlo.analysis import ConvertProgram, convert_programs
from hlo_doctor.lint.dispatch import HostDispatch
from hlo_doctor.lint.measurement import DEFAULT_BUDGET_S
from hlo_doctor.trace import CompileEvent

if TYPE_CHECKING:
    import pandas as pd

    from hlo_doctor.lint.store import MeasurementStore
    from hlo_doctor.memory import MemoryReport, ProgramMemory
    from hlo_doctor.opstats.breakdown import StepBreakdown
    from hlo_doctor.opstats.per_step import PerStepLater


@dataclass(frozen=True, slots=True)
class OpTiming:
    """What the op-stats table says about one op (summed over its rows)."""

    time_per_step_us: float
    pct_of_step: float | None
    occurrences: int
    """Summed over every device the op ran on."""
    bytes_accessed: int | None
    source: str = ""
    occurrences_per_device: float = 0.0
    """Occurrences on one device (the table's ``occurrences`` divided by its ``devices``): how often
    the program ran, which is what "per step" means; 2 cores running it once are one run."""
    category: str = ""
    """The op-stats category (``copy``, ``convert``, ``matmul``...)."""


@dataclass(frozen=True, slots=True, eq=False)
class Context:
    """Everything a rule may look at. Built once per input; rules must not modify it.

    ``table`` is the op-stats table (columns: :data:`hlo_doctor.opstats.COLUMNS`) or None for an
    HLO-only input; ``source_root`` is the tree given with ``--source`` (source rules).
    """

    modules: tuple[HloModule, ...] = ()
    table: pd.DataFrame | None = None
    step_time_us: float | None = None
    step_times_us: Sequence[float] = ()
    """Each traced step's wall time (what ``step_time_us`` is the mean of); () where the input keeps none."""
    num_steps: int = 0
    compile_events: tuple[CompileEvent, ...] = ()
    host_dispatch: tuple[HostDispatch, ...] = ()
    """Host dispatch spans per program, when the input is a trace (see :mod:`.dispatch`)."""
    per_step_data: pd.DataFrame | PerStepLater | None = None
    """:attr:`per_step`, or what builds it the first time a rule reads it (a capture's sums:
    :mod:`hlo_doctor.opstats.per_step`); None where the input keeps none."""
    breakdown: StepBreakdown | None = None
    """Where each step's time goes per device: busy, idle and what the host did meanwhile
    (:mod:`hlo_doctor.opstats.breakdown`); None for an input without one."""
    source_root: Path | None = None
    backend: str = ""
    device_kind: str = ""
    """The capture's device as its trace names it (``TPU v5 lite``, ``NVIDIA H200``); "" where none."""
    origin: str = ""
    kind: str = ""
    """``run``, ``xplane``, ``opstats``, ``xla-dump``, ``hlo`` or ``example``."""
    capture: tuple[str, ...] = ()
    """The files read (each host's xplane, the export, the HLO texts), relative to the working folder."""
    capture_via: str = ""
    """Why they are not the path given (``the baseline profile of the doctor folder runs/doctor``)."""
    versions: tuple[tuple[str, str], ...] = ()
    """(package, version) the capture names (``jax``, ``jaxlib``...): what ran it."""
    memory: MemoryReport | None = None
    """Each program's buffer assignment read (:mod:`hlo_doctor.memory`): its peak, the buffers live at
    it, its allocations; None for an input without buffer assignments (a trace JSON, HLO text)."""
    what_if: bool = False
    """Rules may time an op's replacement on this machine where the capture cannot price it
    (:mod:`hlo_doctor.lint.whatif`): ``diagnose`` and ``doctor`` turn it on unless ``--no-what-if``."""
    measurements: MeasurementStore | None = None
    """Where what a what-if measures is kept and read back (:mod:`hlo_doctor.lint.store`: with the
    capture, so the same capture gives the same figures); None: in this process only."""
    measure_seconds: float = DEFAULT_BUDGET_S
    """The most seconds a replay of one fix times pairs before it stops undecided
    (:func:`~hlo_doctor.lint.measurement.measure_budget`: ``HLO_DOCTOR_MEASURE_SECONDS``)."""

    # -- what is available ------------------------------------------------------------------------

    @property
    def per_step(self) -> pd.DataFrame | None:
        """Each op's time in each traced step (columns ``step``, ``module``, ``program_id``, ``op``,
        ``time_us``: :attr:`~hlo_doctor.opstats.schema.OpStats.per_step`); None where the input keeps
        none. Built the first time it is read, then kept."""
        from hlo_doctor.opstats.per_step import built  # (here: importing opstats loads pandas)

        frame: pd.DataFrame | None = built(self)
        return frame

    @property
    def has_opstats(self) -> bool:
        return self.table is not None and len(self.table) > 0

    def provides(self, requirement: str) -> bool:
        """Whether the input has what a rule ``requires`` (``hlo``, ``opstats``, ``source``)."""
        if requirement == "hlo":
            return bool(self.modules)
        if requirement == "opstats":
            return self.has_opstats or bool(self.compile_events)
        if requirement == "source":
            return self.source_root is not None
        if requirement == "memory":
            return self.memory is not None and bool(self.memory.programs)
        return False

    def program_memory(self, module: HloModule) -> ProgramMemory | None:
        """The memory of ``module``'s program (by name and program id), when the input has it."""
        if self.memory is None:
            return None
        p = self.memory.program(module.name, module.program_id)
        return p if p is not None and not p.error else None

    # -- HLO navigation -----------------------------------------------------------------------------

    def callers(self, module: HloModule) -> dict[str, HloInstruction]:
        """Computation name -> the instruction that calls it (fusion, reduce, while...)."""
        return analysis.callers(module)

    def entry_op(self, module: HloModule, inst: HloInstruction) -> HloInstruction:
        """The entry-computation instruction that executes ``inst`` (itself, or its outer fusion)."""
        return analysis.entry_op(module, inst)

    # -- op stats join ---------------------------------------------------------------------------------

    def op_timing(self, module: HloModule | str, op: str, program_id: int | None = None) -> OpTiming | None:
        """Op-stats figures of ``op`` in ``module`` (by name, and program id when both sides know it)."""
        if not self.has_opstats:
            return None
        assert self.table is not None
        name = module if isinstance(module, str) else module.name
        if program_id is None and not isinstance(module, str):
            program_id = module.program_id
        t = self.table
        rows = t[(t["module"] == name) & (t["op"] == op)]
        if program_id is not None and len(rows) and "program_id" in rows:
            with_id = rows[rows["program_id"] == program_id]  # ids are uint64 Python ints
            if len(with_id):
                rows = with_id
        if not len(rows):
            return None
        tps = float(rows["time_per_step_us"].fillna(0).sum())
        pct_col = rows["pct_of_step"] if "pct_of_step" in rows else None
        if self.step_time_us:
            pct: float | None = 100.0 * tps / self.step_time_us
        elif pct_col is not None and pct_col.notna().any():
            pct = float(pct_col.fillna(0).sum())
        else:
            pct = None
        ba = rows["bytes_accessed"] if "bytes_accessed" in rows else None
        bytes_accessed = int(ba.dropna().iloc[0]) if ba is not None and ba.notna().any() else None
        sources = [str(v) for v in rows["source"].dropna()] if "source" in rows else []
        occ = rows["occurrences"].fillna(0)
        devices = rows["devices"].fillna(1).clip(lower=1) if "devices" in rows else 1
        cats = [str(v) for v in rows["category"].dropna()] if "category" in rows else []
        return OpTiming(tps, pct, int(occ.sum()), bytes_accessed, next((s for s in sources if s), ""),
                        occurrences_per_device=float((occ / devices).sum()),
                        category=next((c for c in cats if c), ""))

    def dispatch(self, module: HloModule | str) -> HostDispatch | None:
        """The host dispatch spans of ``module``'s program, when the trace has them."""
        name = module if isinstance(module, str) else module.name
        return next((d for d in self.host_dispatch if d.module == name), None)

    def module_rows(self, module: HloModule | str) -> pd.DataFrame | None:
        """The op-stats rows of one module (by name and, when known, program id)."""
        if not self.has_opstats:
            return None
        assert self.table is not None
        name = module if isinstance(module, str) else module.name
        t = self.table
        rows = t[t["module"] == name]
        pid = None if isinstance(module, str) else module.program_id
        if pid is not None and len(rows):
            with_id = rows[rows["program_id"] == pid]  # ids are uint64 Python ints
            if len(with_id):
                rows = with_id
        return rows

    def finding(
        self,
        rule: type[Any] | Any,
        module: HloModule | None,
        inst: HloInstruction | None,
        message: str,
        *,
        recoverable_fraction: float | None = None,
        evidence: Sequence[str] = (),
        fix: str | None = None,
        extra: Iterable[tuple[str, Any]] = (),
        severity: Severity | None = None,
        source_inst: HloInstruction | None = None,
        bytes_accessed: int | None = None,
        recoverable_us: float | None = None,
        parts: Sequence[tuple[str, float]] | None = None,
    ) -> Finding:
        """A finding on ``inst`` with its time joined from the op stats.

        ``inst`` may be a fused instruction: the time is that of the entry-level op executing it.
        ``recoverable_fraction`` of that time is what a fix is expected to get back (None: unknown);
        ``recoverable_us`` replaces that estimate with the ops' own time when the rule knows more (a
        chain of ops); ``parts`` replaces both with what the time is made of (:func:`.parts.bounded`:
        op time, the runtime's idle, host time), the recoverable time then being their sum.
        The source line is that of ``source_inst`` (or ``inst``); for a fusion, that of the op that
        matters inside it (:func:`hlo_doctor.hlo.analysis.key_instruction`), not its root's: the first
        frame of its stack outside the frameworks (:mod:`hlo_doctor.hlo.frames`), with the whole stack
        in ``Finding.stack``.
        """
        op = self.entry_op(module, inst) if module is not None and inst is not None else None
        timing = self.op_timing(module, op.name) if module is not None and op is not None else None
        src_inst = source_inst or inst
        if src_inst is not None and module is not None and src_inst.opcode == "fusion":
            src_inst = analysis.key_instruction(module, src_inst)
        source = src_inst.source if src_inst is not None else ""
        stack = src_inst.stack if src_inst is not None and source else ()
        if not source and timing is not None and src_inst is op and op is not None and op.opcode != "fusion":
            source = timing.source  # the table's line for this same op (HLO text without metadata)
        recoverable = None
        if timing is not None and recoverable_fraction is not None:
            recoverable = timing.time_per_step_us * max(0.0, min(1.0, recoverable_fraction))
        if timing is not None and recoverable_us is not None:
            recoverable = max(0.0, recoverable_us)
        kept: tuple[tuple[str, float], ...] = (("op", recoverable),) if recoverable is not None else ()
        if timing is not None and parts is not None:
            kept = tuple((name, max(0.0, us)) for name, us in parts)
            recoverable = math.fsum(us for _, us in kept)
        if bytes_accessed is None and op is not None:
            bytes_accessed = timing.bytes_accessed if timing and timing.bytes_accessed else _op_bytes(module, op)
        return Finding(
            code=rule.code, name=rule.name, severity=severity or rule.severity, message=message,
            module=module.name if module is not None else "", op=op.name if op is not None else "",
            shape=op.shape.text() if op is not None else "",
            program_id=module.program_id if module is not None else None,
            time_per_step_us=timing.time_per_step_us if timing else None,
            pct_of_step=timing.pct_of_step if timing else None,
            bytes_accessed=bytes_accessed, recoverable_us=recoverable, parts=kept, source=source,
            evidence=tuple(evidence), fix=rule.fix if fix is None else fix, extra=tuple(extra),
            stack=tuple((f.file, f.line, f.function) for f in stack),
        )


def _op_bytes(module: HloModule | None, op: HloInstruction) -> int | None:
    if module is None:
        return None
    return sum(o.shape.nbytes for o in module.operands_of(op)) + op.shape.nbytes


# -------------------------------------------------------------------------------------------------
# Analyses that need op timings
# -------------------------------------------------------------------------------------------------

def producing_convert_program(ctx: Context, module: HloModule, param: HloInstruction) -> ConvertProgram | None:
    """The convert program that most likely produced entry parameter ``param`` of ``module``.

    XLA programs do not record which host-side array feeds which parameter, so this is a heuristic:
    a separate program whose only work is a widening convert and whose result has exactly the
    parameter's dtype and dimensions. With op stats both must also run about as often (within 2x),
    which is what a per-step eager ``astype`` feeding a per-step jitted call looks like.
    """
    if param.opcode != "parameter" or param.computation != module.entry_name:
        return None
    for prog in convert_programs(ctx.modules):
        if prog.module is module:
            continue
        if prog.shape.dtype != param.shape.dtype or prog.shape.dims != param.shape.dims:
            continue
        if ctx.has_opstats:
            a = ctx.op_timing(prog.module, prog.op.name)
            mine = ctx.module_rows(module)
            if a is not None and mine is not None and len(mine):
                devices = mine["devices"].clip(lower=1) if "devices" in mine else 1
                b = float((mine["occurrences"] / devices).max())
                if a.occurrences_per_device and b and not (0.5 <= a.occurrences_per_device / b <= 2.0):
                    continue
        return prog
    return None
