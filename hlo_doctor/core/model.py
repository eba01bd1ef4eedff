"""Values passed between stages: findings and run information.

Frozen, slotted dataclasses. HLO types live in :mod:`hlo_doctor.hlo`; the op-stats table (the one
pandas table) in :mod:`hlo_doctor.opstats`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import Any

PART_LABELS: dict[str, str] = {
    "op": "op time",
    "runtime_idle": "runtime idle",
    "host": "host",
    "compile": "compile",
}
"""The parts a recoverable time is made of (:attr:`Finding.parts`), as views name them: the ops' own
time per step; on XLA:CPU the runtime's idle just before and after them while the host waits
(setting up and releasing their buffers); host time the device waited for (the Python and dispatch
of a removed call); compile time inside the measured steps."""


def sum_parts(groups: Iterable[tuple[tuple[str, float], ...]]) -> tuple[tuple[str, float], ...]:
    """Parts of several findings added name by name, in :data:`PART_LABELS`' order."""
    total: dict[str, float] = {}
    for parts in groups:
        for name, us in parts:
            total[name] = total.get(name, 0.0) + us
    order = list(PART_LABELS)
    return tuple(sorted(total.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


class Severity(IntEnum):
    """How much a finding matters; ordered so ``--fail-on`` can compare."""

    INFO = 10
    LOW = 20
    MEDIUM = 30
    HIGH = 40
    ERROR = 50
    """An internal error (a rule crashed): reported as a finding, never aborts the run."""

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError as exc:
            names = ", ".join(s.name.lower() for s in cls)
            raise ValueError(f"unknown severity {text!r} (one of: {names})") from exc

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Finding:
    """One piece of wasted work (or an internal error of a rule), with what it costs and how to fix it."""

    code: str
    """Rule code, ``HD002``."""
    name: str
    """Rule name, ``copy.aliasing-input``."""
    severity: Severity
    message: str
    """One sentence a person reads first."""
    module: str = ""
    op: str = ""
    """HLO instruction name (``copy.2``)."""
    shape: str = ""
    """The op's shape as HLO writes it (``f32[512,256000]{1,0}``)."""
    program_id: int | None = None
    time_per_step_us: float | None = None
    """None when the input had no timings (HLO-only input)."""
    pct_of_step: float | None = None
    bytes_accessed: int | None = None
    recoverable_us: float | None = None
    """Estimate of the time per step a fix gets back: the sum of :attr:`parts` when it has them."""
    source: str = ""
    """``file:line`` from the HLO metadata (or the source file a source rule read): the first frame of
    :attr:`stack` outside the frameworks, else its innermost frame; the path as captured."""
    evidence: tuple[str, ...] = ()
    """The instructions (or source lines) involved, as printed."""
    fix: str = ""
    """Id of a bundled fix that removes it (``bf16-greedy-sampler``), or empty."""
    extra: tuple[tuple[str, Any], ...] = field(default=())
    """Rule-specific details (key, value) that renderers may show."""
    stack: tuple[tuple[str, int, str], ...] = ()
    """Every frame of the op's Python stack, ``(file, line, function)``, innermost first (empty when
    the metadata has none); machine formats write it whole."""

    parts: tuple[tuple[str, float], ...] = ()
    """:attr:`recoverable_us` as what it is made of, ``(name, us per step)`` with names from
    :data:`PART_LABELS` (the ops' own time, the runtime's idle around them, host time, compile time),
    each bounded by what the trace holds for it; they sum to :attr:`recoverable_us`. Empty without
    a recoverable time."""
    remedy: str = ""
    """What to do where the finding's line is inside a model library (keras-hub, transformers' Flax
    models, recurrentgemma): that library's own setting, or the code to change where it has none,
    with the what-if that checked it (:mod:`hlo_doctor.lint.remedies`); "" elsewhere."""

    def __post_init__(self) -> None:
        if self.parts and self.recoverable_us is not None:
            total = math.fsum(us for _, us in self.parts)
            if not math.isclose(total, self.recoverable_us, rel_tol=1e-9, abs_tol=1e-6):
                raise ValueError(f"{self.code} {self.op}: parts {self.parts} sum to {total}, "
                                 f"not the recoverable {self.recoverable_us}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parts"] = {name: us for name, us in self.parts}
        d["severity"] = str(self.severity)
        d["evidence"] = list(self.evidence)
        d["extra"] = {k: v for k, v in self.extra}
        d["stack"] = [{"file": file, "line": line, "function": function} for file, line, function in self.stack]
        return d


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What ``run.json`` says about a capture."""

    target: str
    backend: str
    """``cpu``, ``gpu`` or ``tpu``."""
    device_kind: str = ""
    steps: int = 0
    warmup: int = 0
    created: str = ""
    versions: tuple[tuple[str, str], ...] = ()
    config: tuple[tuple[str, Any], ...] = ()


ProgressFn = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: what a long stage calls as it advances (the CLI draws it)."""
