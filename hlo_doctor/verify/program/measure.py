"""Warm both sides, then measured rounds interleaved AB BA AB..., comparing their outputs as they go.

Every call of a step is timed from its call to ``jax.block_until_ready`` of what it returned; its
outputs are copied to the host after the timer stops (a donated output is gone by the next call).
A round's backend compiles are counted by the one compile counter (:mod:`hlo_doctor.verify.compiles`),
with JAX's reason. Round ``k`` of one side is compared with round ``k`` of the other call by call, as
the second of the pair runs (only the first side's outputs of one round are kept); so are the warm-up
calls. A step that raises ends the measuring: the report names the
side, the round and the call.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hlo_doctor.verify.compiles import compile_window
from hlo_doctor.verify.program.outputs import Difference, Leaf, first_difference, host_leaves
from hlo_doctor.verify.program.settings import ProgramSettings
from hlo_doctor.verify.program.target import Side
from hlo_doctor.verify.results import Stopping
from hlo_doctor.verify.rounds import LABELS, run_rounds
from hlo_doctor.verify.settings import ProgressFn


@dataclass(frozen=True, slots=True)
class ProgramRound:
    """One measured round of one side: ``steps`` calls of its step function."""

    variant: str
    index: int
    """The side's own round number, from 0."""
    order: int
    """Position in the whole interleaved sequence, from 0."""
    step_times_ms: tuple[float, ...]
    wall_ms: float
    """The whole round, first call to last result (outputs copied to the host included, and for the
    second side of a pair, compared with the first's)."""
    compiles: tuple[str, ...]
    """One line per backend compile inside the round: the program and JAX's reason."""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"variant": self.variant, "index": self.index, "order": self.order,
                "step_times_ms": list(self.step_times_ms), "wall_ms": self.wall_ms, "compiles": list(self.compiles)}


@dataclass(frozen=True, slots=True)
class Raised:
    """A step that raised: which side, when, and what."""

    variant: str
    when: str
    """``warm-up call 1`` or ``round 3, step 2``."""
    error: str

    def describe(self) -> str:
        """``treatment raised ZeroDivisionError in round 3, step 2: ...``."""
        return f"{self.variant} raised {self.error} in {self.when}"


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The first call whose outputs differ between the sides."""

    when: str
    """``round 2, step 4`` or ``warm-up call 1``."""
    difference: Difference

    def describe(self) -> str:
        """``round 2, step 4: output [0], index (3,): 5 vs 9``."""
        return f"{self.when}: {self.difference.describe()}"


@dataclass
class Measured:
    """What the rounds gave: per side, its rounds and warm-up time; the first mismatch; a raise."""

    rounds: dict[str, list[ProgramRound]] = field(default_factory=lambda: {label: [] for label in LABELS})
    warmup_s: dict[str, float] = field(default_factory=dict)
    compared: int = 0
    """Calls whose outputs were compared (warm-up calls included)."""
    mismatch: Mismatch | None = None
    raised: Raised | None = None
    stopping: Stopping | None = None
    """How many rounds ran and why no more (None when a step raised)."""


class _StepRaised(Exception):
    def __init__(self, raised: Raised) -> None:
        super().__init__(raised.describe())
        self.raised = raised


def _call(side: Side, when: str) -> tuple[float, tuple[Leaf, ...]]:
    """One call: its time in ms (to the last result) and its outputs on the host."""
    import jax

    from hlo_doctor.capture_guard import call_target
    from hlo_doctor.core.errors import HloDoctorError

    try:
        t0 = time.perf_counter()
        out = call_target(side.step, what=f"{side.label} {side.spec}, {when},")
        jax.block_until_ready(out)
        elapsed = (time.perf_counter() - t0) * 1e3
        return elapsed, host_leaves(out)
    except HloDoctorError as exc:  # sys.exit inside the step
        raise _StepRaised(Raised(side.label, when, exc.what)) from exc
    except Exception as exc:  # noqa: BLE001 - the user's step may raise anything
        raise _StepRaised(Raised(side.label, when, f"{type(exc).__name__}: {exc}")) from exc


def _compare(result: Measured, when: str, a: tuple[Leaf, ...], b: tuple[Leaf, ...], settings: ProgramSettings) -> None:
    if result.mismatch is not None:
        return
    result.compared += 1
    diff = first_difference(a, b, rtol=settings.rtol, atol=settings.atol)
    if diff is not None:
        result.mismatch = Mismatch(when, diff)


def measure(base: Side, treat: Side, settings: ProgramSettings, progress: ProgressFn,
            decided: Callable[[Measured, int], bool] | None = None) -> Measured:
    """Warm both sides, run ``settings.rounds`` interleaved rounds each (with a budget, more pairs until
    ``decided(measured, look)``), comparing the outputs call by call."""
    result = Measured()
    sides = {"baseline": base, "treatment": treat}
    try:
        warm: dict[str, list[tuple[Leaf, ...]]] = {}
        for label, side in sides.items():
            progress(f"warm-up {label}", 0, settings.warmup)
            start = time.perf_counter()
            warm[label] = []
            for i in range(settings.warmup):
                warm[label].append(_call(side, f"warm-up call {i + 1}")[1])
                progress(f"warm-up {label}", i + 1, settings.warmup)
            result.warmup_s[label] = time.perf_counter() - start
        for i, (a, b) in enumerate(zip(warm["baseline"], warm["treatment"], strict=True)):
            _compare(result, f"warm-up call {i + 1}", a, b, settings)
        del warm
        rounds = _Rounds(result, sides, settings, progress)
        progress("rounds", 0, 2 * settings.rounds)
        result.stopping = run_rounds(settings.rounds, rounds.run, budget_s=settings.budget_s,
                                     decided=None if decided is None else (lambda look: decided(result, look)))
    except _StepRaised as exc:
        result.raised = exc.raised
    return result


def _other(label: str) -> str:
    return LABELS[1] if label == LABELS[0] else LABELS[0]


class _Rounds:
    """One measured round per call of :meth:`run`; round ``k`` of both sides compared once both ran."""

    def __init__(self, result: Measured, sides: dict[str, Side], settings: ProgramSettings,
                 progress: ProgressFn) -> None:
        self.result, self.sides, self.settings, self.progress = result, sides, settings, progress
        self.pending: dict[str, list[tuple[Leaf, ...]]] = {}
        self.done = 0

    def run(self, label: str, order: int) -> None:
        """Round ``order`` of the sequence, on side ``label``."""
        side, index = self.sides[label], len(self.result.rounds[label])
        times: list[float] = []
        # The first side of a pair keeps its outputs; the second compares each call with them as it
        # goes (after the call's timer stopped) and keeps nothing: one round's outputs in memory.
        first = self.pending.pop(_other(label), None)
        outputs: list[tuple[Leaf, ...]] = []
        # No collector pause inside the window (a full collection of JAX's heap takes a fraction of a
        # second, far more than a step); the young objects of the previous round go first, cheaply.
        gc.collect(0)
        gc.disable()
        try:
            with compile_window(explain=True) as window:
                start = time.perf_counter()
                for step in range(self.settings.steps):
                    when = f"round {index + 1}, step {step + 1}"
                    elapsed, leaves = _call(side, when)
                    times.append(elapsed)
                    if first is None:
                        outputs.append(leaves)
                    else:
                        pair = (first[step], leaves) if label == "treatment" else (leaves, first[step])
                        _compare(self.result, when, *pair, self.settings)
                wall = (time.perf_counter() - start) * 1e3
        finally:
            gc.enable()
        compiles = window.reasons or tuple(f"{name}: JAX gave no reason" for name in window.programs)
        self.result.rounds[label].append(ProgramRound(label, index, order, tuple(times), wall, compiles))
        if first is None:
            self.pending[label] = outputs
        self.done += 1
        # With a budget the total grows by a pair at each look that does not decide.
        self.progress("rounds", self.done, max(2 * self.settings.rounds, self.done + self.done % 2))
