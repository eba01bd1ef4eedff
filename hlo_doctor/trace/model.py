"""What hlo-doctor reads from a trace: op events as columns, step marks, compile work, HLO modules."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OpEvents:
    """HLO op events of one trace as parallel columns (a list per field: traces hold millions).

    Times are nanoseconds on the host's clock. ``self_ns`` is the duration minus the time of op
    events nested inside it on the same line (a while loop around its body's ops).
    """

    host: list[str]
    device: list[str]
    """The plane (``/host:CPU``, ``/device:TPU:0``) that ran the op."""
    module: list[str]
    program_id: list[int]
    op: list[str]
    start_ns: list[float]
    duration_ns: list[float]
    self_ns: list[float]
    run_id: list[int]
    """Which execution of the program the event belongs to (``run_id`` stat on XLA:CPU, the index
    of the enclosing ``XLA Modules`` event on a device plane); -1 when unknown."""

    def __len__(self) -> int:
        return len(self.op)


@dataclass(frozen=True, slots=True)
class StepMark:
    """One step annotation (``StepTraceAnnotation``)."""

    host: str
    name: str
    step_num: int
    start_ns: float
    duration_ns: float


@dataclass(frozen=True, slots=True)
class CompileEvent:
    """Compile work seen inside the traced window."""

    name: str
    start_us: float
    duration_us: float
    module: str = ""
    """The module being compiled, when the trace says."""
    detail: str = ""
    """Where it came from: host and line, plus any stats that name the function."""


@dataclass(frozen=True, slots=True)
class ModuleProto:
    """One HLO module stored in a trace's metadata plane."""

    name: str
    program_id: int | None
    hlo_proto: bytes
    host: str


@dataclass(frozen=True, slots=True)
class Trace:
    """Everything hlo-doctor reads from one or more xplane files of one capture (several hosts)."""

    paths: tuple[str, ...]
    backend: str
    """``cpu``, ``gpu`` or ``tpu``: where the op events came from."""
    device_kind: str
    ops: OpEvents
    steps: tuple[StepMark, ...]
    compile_events: tuple[CompileEvent, ...]
    module_protos: tuple[ModuleProto, ...]
    versions: tuple[tuple[str, str], ...]
    """``jax_version`` and friends, from the metadata plane's stats."""
    op_expressions: tuple[tuple[str, int, str, str], ...] = ()
    """(module, program id, op, HLO text of the op) that device traces carry in their event metadata
    (or xprof's ``hlo_stats`` gives): the shape's source when the trace holds no HLO module."""
