"""What hlo-doctor reads from a trace: op events as columns, step marks, compile work, HLO modules."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from hlo_doctor.trace.peaks import DevicePeaks

if TYPE_CHECKING:  # pandas is imported where a frame of the events is made, not by their type
    import pandas as pd


class Coded:
    """A column of names as a code per event into its distinct values: what a ``pandas.Categorical``
    holds, without pandas (a host's read sums its columns before pandas is imported, so that pandas's
    35-77 MiB are not resident at the read's peak). :meth:`categorical` is the pandas column."""

    __slots__ = ("_categorical", "categories", "codes")

    def __init__(self, codes: np.ndarray, values: Sequence[Any]) -> None:
        self.codes = codes
        """A code per event (an index into :attr:`categories`), as narrow as pandas keeps them."""
        # (an object array of the values as they are: ints stay Python ints, tuples stay whole)
        self.categories: np.ndarray = np.array([*values, None], dtype=object)[:-1]
        self._categorical: pd.Categorical | None = None

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int) -> Any:
        return self.categories[self.codes[i]]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.categories[self.codes].tolist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        values = self.categories[self.codes]
        return values if dtype is None else values.astype(dtype)

    def categorical(self) -> pd.Categorical:
        """The column as a ``pandas.Categorical`` (made once; its codes are these)."""
        if self._categorical is None:
            from hlo_doctor.core.lazy import pd

            self._categorical = pd.Categorical.from_codes(self.codes, categories=pd.Index(self.categories, dtype=object))
        return self._categorical


@dataclass(frozen=True, slots=True)
class OpEvents:
    """HLO op events of one trace as parallel columns (traces hold millions of events).

    Names are :class:`Coded` (a code per event; ``.categorical()`` gives the pandas column), numbers
    numpy arrays. Times are nanoseconds (host clock on XLA:CPU, the device clock where the trace gives
    it). ``self_ns`` is the duration minus the time of op events nested inside it on the same line (a
    while loop around its body's ops).
    """

    host: Coded
    device: Coded
    """The plane (``/host:CPU``, ``/device:TPU:0``) that ran the op."""
    module: Coded
    program_id: Coded
    """Program ids as Python ints (uint64: libtpu's exceed 2**63); -1 when unknown."""
    op: Coded
    start_ns: np.ndarray
    duration_ns: np.ndarray
    """Total duration of the event (of all its runs, for an aggregated event)."""
    self_ns: np.ndarray
    run_id: np.ndarray
    """Which execution of the program the event belongs to (``run_id`` stat on XLA:CPU, the index
    of the enclosing ``XLA Modules`` event on a device plane); -1 when unknown."""
    occurrences: np.ndarray
    """Runs the event stands for: 1, or an aggregated event's ``num_occurrences``."""

    def __len__(self) -> int:
        return len(self.op)

    def frame(self) -> pd.DataFrame:
        """The events as a frame (no copy of the columns; loads pandas): host, device, module,
        program_id, op (categorical), start_ns, duration_ns, self_ns, run_id, occurrences."""
        from hlo_doctor.core.lazy import pd

        return pd.DataFrame({
            "host": self.host.categorical(), "device": self.device.categorical(),
            "module": self.module.categorical(), "program_id": self.program_id.categorical(),
            "op": self.op.categorical(), "start_ns": self.start_ns, "duration_ns": self.duration_ns,
            "self_ns": self.self_ns, "run_id": self.run_id, "occurrences": self.occurrences,
        }, copy=False)


class StepMark(NamedTuple):
    """One step annotation (``StepTraceAnnotation``). A named tuple: a device writes one a step
    (thousands a capture), made at a tuple's cost."""

    host: str
    name: str
    step_num: int
    start_ns: float
    duration_ns: float
    device: str = ""
    """The device plane of a device step (the ``Steps`` line); empty for a host annotation."""


@dataclass(frozen=True, slots=True)
class CompileEvent:
    """One host event of compile work seen inside the traced window (see :mod:`.compiles`: one
    compile of a program is often several nested events)."""

    name: str
    start_us: float
    duration_us: float
    module: str = ""
    """The module being compiled: from the event's stats, else (for the outermost event of a compile)
    the module that first ran under a new program id right after it on that host."""
    detail: str = ""
    """Where it came from: host and line, plus any stats that name the function."""
    thread: str = ""
    """``host plane line-id``: events with the same value ran on one thread; empty when unknown."""
    function: str = ""
    """The name jax dispatched (the innermost ``PjitFunction(<name>)`` span around the event)."""
    frames: tuple[str, ...] = ()
    """Python frames around that dispatch, innermost first (``file.py:12 func``, as the Python
    tracer names them; its own ``PjitFunction(...)`` spans included): who called it."""
    program_id: int | None = None
    """The program the compile built, when known (stats, or the next execution on the host)."""
    step: int = -1
    """The step (``step_num`` of the host step mark) the event started in; -1 outside every step."""

    def __post_init__(self) -> None:
        # A JSON round trip gives a list: kept as a tuple so that events compare equal.
        if not isinstance(self.frames, tuple):
            object.__setattr__(self, "frames", tuple(self.frames))


@dataclass(frozen=True, slots=True)
class ModuleProto:
    """One HLO module stored in a trace's metadata plane."""

    name: str
    program_id: int | None
    hlo_proto: bytes
    host: str
    path: str = ""
    """The file it was read from (named when XLA's printer cannot print it)."""


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
    op_sources: tuple[tuple[str, int, str, str], ...] = ()
    """(module, program id, op, ``file:line``) from a trace JSON's ``source`` / ``source_stack`` args
    (:mod:`.source_args`): the op's line when the trace holds no HLO module."""
    stack_files: tuple[str, ...] = ()
    """Full paths of the files those args' stacks name: what tells the Python tracer's frames (base
    names) apart when the trace holds no HLO module (:class:`~hlo_doctor.opstats.host_time.FrameKinds`)."""
    device_steps: tuple[StepMark, ...] = ()
    """Steps of the device ``Steps`` lines (TPU), one per device and step."""
    num_devices: int = 0
    """Devices whose op events the table counts: device planes with op events, or hosts on XLA:CPU."""
    warnings: tuple[str, ...] = ()
    """What the reader could not read as the conventions say and worked around, one line each."""
    op_costs: tuple[tuple[str, int, str, float | None, float | None], ...] = ()
    """(module, program id, op, FLOPs, bytes accessed) of one run of the op, as the trace states them
    (TPU op metadata, GPU event stats ``flops`` / ``bytes_accessed``); None where it does not."""
    peaks: DevicePeaks | None = None
    """Peak FLOP/s and HBM bandwidth the first device plane with op events states (:mod:`.peaks`)."""


@dataclass(frozen=True, slots=True)
class HostDispatch:
    """Outermost ``PjitFunction(<name>)`` spans of one program on the host: what launching it costs."""

    module: str
    """``jit_<name>``: the module name XLA gives the program."""
    calls: int
    total_us: float

    @property
    def per_call_us(self) -> float:
        """Mean host time of one dispatch."""
        return self.total_us / self.calls if self.calls else 0.0
