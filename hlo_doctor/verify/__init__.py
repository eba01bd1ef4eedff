"""Same-session A/B verification of a fix: does it help, and does it stay on the precompiled graphs?

Both variants (baseline and treatment engine source trees) are loaded side by side in this process,
each under its own module name, each warmed up with its own precompiled menu. Then measured rounds
of the offline batch run interleaved (AB, BA, AB, ...: the order alternates per pair so that neither
variant always runs first), with the backend compiles inside every round counted by
``jax.monitoring``. Five checks decide the verdict:

1. **compiles**: no backend compile inside any measured round, in either variant (with JAX's
   cache-miss reason when there is one). A compile there means a call missed the precompiled menu.
2. **batch TTFT**: the treatment's median batch TTFT over the baseline's is at most ``ttft_bound``
   (default 1.25). Every round starts the engine's sampler programs cold (``restart_sampler()``,
   outside the measured window), as after an engine start, so a menu miss compiles inside every
   round's prefill. (An engine without that hook runs warm rounds: a miss compiles in the first
   round only, and the worst rounds are compared as well.)
3. **tokens**: greedy tokens identical between variants in every round; logprobs (when requested)
   bit-identical and float32.
4. **treatment HLO**: the treatment's own captured trace, diagnosed by hlo-doctor's rules, has no
   aliasing copy (HD002), no standalone convert program (HD003), no widening convert before the
   argmax (HD001) and no over-wide read (HD004), and its argmax reads the model's narrow dtype.
   This looks at what ran, not at any setting of the treatment.
5. **throughput**: :func:`hlo_doctor.statistics.compare_samples` on the per-round throughputs
   (and on the pooled decode step times): improved / no change / regressed / inconclusive. It
   passes on improved or no change (``require_improvement`` makes no change fail).

Checks 1-4 come first in every report: a miscompiled treatment fails on them whatever its
throughput says.

The engine driver interface (what a tree must expose; the bundled engine does) is documented in
``docs/verify.md``: ``EngineConfig`` (a dataclass with ``vocab_size``, ``batch``, ``max_tokens``,
``logprobs``...), ``validate(config)``, ``OfflineEngine(config)`` with ``warmup()`` and
``run_batch()`` returning a ``BatchResult``, and ``profile_target(config)`` for check 4. A tree
without ``OfflineEngine`` is driven through ``run_offline_batch(config)`` per round, which warms up
again each time (slower, same figures: warm-up is outside every measured window).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from hlo_doctor.core.errors import HloDoctorError, InputError
from hlo_doctor.core.model import Finding, ProgressFn
from hlo_doctor.statistics import Outcome, SampleComparison, compare_samples

__all__ = [
    "BACKEND_COMPILE_EVENT",
    "Check",
    "HloEvidence",
    "RemovedOp",
    "RoundResult",
    "VariantSummary",
    "VerifyReport",
    "VerifySettings",
    "argmax_reads",
    "check_ttft",
    "engine_config",
    "failing_findings",
    "metric_rows",
    "hlo_evidence",
    "render_json",
    "render_markdown",
    "run_verify",
]

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
HLO_RULES = ("HD001", "HD002", "HD003", "HD004")
"""The rules check 4 runs on the treatment's own trace: any finding of theirs fails it."""

DEFAULT_ROUNDS = 6
DEFAULT_MAX_TOKENS = 16
DEFAULT_TTFT_BOUND = 1.25
DEFAULT_MIN_EFFECT = 0.02
DEFAULT_ALPHA = 0.05
DEFAULT_PROFILE_STEPS = 3

"""``progress(stage, done, total)``; stages: ``prepare``, ``warmup``, ``rounds``, ``profile``."""


# -------------------------------------------------------------------------------------------------
# Settings and results
# -------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class VerifySettings:
    """What to verify and how hard to measure it."""

    fix: str | None = None
    """A bundled fix id; the treatment is a patched copy of the baseline when no treatment is given."""
    variant: str = "full"
    baseline: Path | None = None
    """Engine source tree of the baseline; None = the bundled reference engine as shipped."""
    treatment: Path | None = None
    rounds: int = DEFAULT_ROUNDS
    """Measured rounds per variant."""
    batch: int | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    vocab: int | None = None
    logprobs: bool = False
    ttft_bound: float = DEFAULT_TTFT_BOUND
    min_effect: float = DEFAULT_MIN_EFFECT
    alpha: float = DEFAULT_ALPHA
    require_improvement: bool = False
    profile_steps: int = DEFAULT_PROFILE_STEPS
    """Decode steps captured for check 4 (and for the baseline's removed ops)."""
    out_dir: Path | None = None
    """Where run directories of check 4 and the patched treatment go; None = a temporary folder."""
    seed: int = 0
    baseline_run: Path | None = None
    """An existing capture of the baseline at the same sizes (``hlo-doctor doctor``'s profile): used for
    the removed-ops figure instead of capturing the baseline again."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k in ("baseline", "treatment", "out_dir", "baseline_run"):
            d[k] = None if d[k] is None else str(d[k])
        return d


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One measured offline batch of one variant."""

    variant: str
    """``baseline`` or ``treatment``."""
    index: int
    """The variant's own round number, from 0."""
    order: int
    """Position in the whole interleaved sequence, from 0."""
    throughput_tok_s: float
    batch_ttft_ms: float
    tpot_ms: float
    step_times_ms: tuple[float, ...]
    compiles: int
    """Backend compiles counted by ``jax.monitoring`` inside the round."""
    compile_reasons: tuple[str, ...]
    """The engine's report of those compiles (program and JAX's cache-miss explanation)."""
    tokens_sha256: str

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["step_times_ms"] = list(self.step_times_ms)
        d["compile_reasons"] = list(self.compile_reasons)
        return d


@dataclass(frozen=True, slots=True)
class VariantSummary:
    """One variant: where its source came from, its warm-up and its rounds."""

    label: str
    source: str
    module: str
    """The module name the tree was loaded under."""
    warmup_s: float
    rounds: tuple[RoundResult, ...]

    def median(self, metric: str) -> float:
        values = [getattr(r, metric) for r in self.rounds]
        return float(np.median(values)) if values else math.nan

    @property
    def step_times_ms(self) -> list[float]:
        return [t for r in self.rounds for t in r.step_times_ms]

    @property
    def compiles(self) -> int:
        return sum(r.compiles for r in self.rounds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label, "source": self.source, "module": self.module, "warmup_s": self.warmup_s,
            "median_throughput_tok_s": self.median("throughput_tok_s"),
            "median_batch_ttft_ms": self.median("batch_ttft_ms"),
            "median_tpot_ms": self.median("tpot_ms"),
            "median_step_ms": float(np.median(self.step_times_ms)) if self.step_times_ms else None,
            "compiles": self.compiles,
            "rounds": [r.to_dict() for r in self.rounds],
        }


@dataclass(frozen=True, slots=True)
class Check:
    """One of the five checks: passed or not, with the figure that decided it."""

    number: int
    name: str
    passed: bool
    figure: str
    """The deciding figure, for the table (``0 compiles``, ``x1.02 (bound 1.25)``)."""
    detail: str = ""
    """Why, in a sentence (JAX's reason for a compile, the first differing token...)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class RemovedOp:
    """A wasteful op found in the baseline's trace, and what became of it in the treatment's trace.

    ``status``: ``gone`` (the op no longer runs: the aliasing copy, the convert program),
    ``narrowed`` (the argmax still runs but no rule flags it: it reads the narrow dtype) or
    ``still there``.
    """

    code: str
    op: str
    module: str
    shape: str
    time_per_step_us: float | None
    """Time per step in the baseline's trace."""
    status: str
    treatment_time_per_step_us: float | None = None
    """The op's time per step in the treatment's trace (narrowed / still there), None when gone."""

    @property
    def removed(self) -> bool:
        return self.status == "gone"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class HloEvidence:
    """What hlo-doctor's own rules and HLO reading say about one variant's captured trace."""

    run_dir: str
    findings: tuple[Finding, ...]
    rules_run: tuple[str, ...]
    argmax_reads: tuple[str, ...]
    """``module: dtype[shape]`` read by each argmax (e.g. ``jit_sample: bf16[64,256000]``)."""
    step_time_us: float | None
    error: str = ""
    """Non-empty when the capture or the diagnosis failed (the check then fails with this reason)."""
    argmax_times: tuple[tuple[str, float], ...] = ()
    """(module, time per step in us) of the entry op holding each argmax, from the op stats."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir, "findings": [f.to_dict() for f in self.findings],
            "rules_run": list(self.rules_run), "argmax_reads": list(self.argmax_reads),
            "argmax_times_us": dict(self.argmax_times), "step_time_us": self.step_time_us, "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Everything verify measured and decided."""

    settings: VerifySettings
    config: dict[str, Any]
    """The engine configuration both variants ran (as the baseline's EngineConfig has it)."""
    baseline: VariantSummary
    treatment: VariantSummary
    checks: tuple[Check, ...]
    throughput: SampleComparison | None
    step_time: SampleComparison | None
    ttft: SampleComparison | None
    treatment_hlo: HloEvidence | None
    baseline_hlo: HloEvidence | None
    removed_ops: tuple[RemovedOp, ...]
    fix_diff: str = ""
    """The unified diff apply-fix made for the treatment (when verify made the treatment)."""
    elapsed_s: float = 0.0
    backend: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        """True only when every check passed."""
        return all(c.passed for c in self.checks)

    @property
    def verdict(self) -> str:
        """``improved`` / ``no change`` / ``regressed`` / ``inconclusive`` (throughput), or ``FAIL: ...``."""
        failed = [c for c in self.checks if not c.passed and c.number != 5]
        if failed:
            return "FAIL: " + "; ".join(c.name for c in failed)
        return str(self.throughput.outcome) if self.throughput is not None else "inconclusive"

    @property
    def removed_time_per_step_us(self) -> float | None:
        """Time per step (baseline trace) of the wasteful ops the treatment no longer runs."""
        times = [o.time_per_step_us for o in self.removed_ops if o.removed and o.time_per_step_us is not None]
        return float(sum(times)) if times else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "verdict": self.verdict,
            "checks": [c.to_dict() for c in self.checks],
            "throughput": self.throughput.to_dict() if self.throughput else None,
            "step_time": self.step_time.to_dict() if self.step_time else None,
            "batch_ttft": self.ttft.to_dict() if self.ttft else None,
            "removed_ops": [o.to_dict() for o in self.removed_ops],
            "removed_time_per_step_us": self.removed_time_per_step_us,
            "baseline": self.baseline.to_dict(),
            "treatment": self.treatment.to_dict(),
            "treatment_hlo": self.treatment_hlo.to_dict() if self.treatment_hlo else None,
            "baseline_hlo": self.baseline_hlo.to_dict() if self.baseline_hlo else None,
            "settings": self.settings.to_dict(),
            "engine_config": self.config,
            "backend": self.backend,
            "elapsed_s": self.elapsed_s,
            "notes": list(self.notes),
            "cold_rounds": not any("cannot restart" in n for n in self.notes),
            "fix_diff": self.fix_diff,
        }


# -------------------------------------------------------------------------------------------------
# Counting compiles
# -------------------------------------------------------------------------------------------------

class _CompileCounter:
    """Counts backend compiles by ``jax.monitoring`` while armed (one listener for the whole verify)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: list[str] = []
        self._armed = False

    def _on_duration(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == BACKEND_COMPILE_EVENT and self._armed:
            with self._lock:
                self._names.append(str(kwargs.get("fun_name", "?")))

    @contextmanager
    def listening(self) -> Iterator[_CompileCounter]:
        import jax

        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        try:
            yield self
        finally:
            try:
                from jax._src import monitoring as _monitoring

                _monitoring.unregister_event_duration_listener(self._on_duration)
            except (ImportError, AttributeError, ValueError):  # older/newer JAX: a stale listener is harmless
                pass

    @contextmanager
    def window(self) -> Iterator[list[str]]:
        """Yield a list that holds, after the block, the names of the programs compiled inside it."""
        seen: list[str] = []
        with self._lock:
            mark = len(self._names)
            self._armed = True
        try:
            yield seen
        finally:
            with self._lock:
                self._armed = False
                seen.extend(self._names[mark:])


# -------------------------------------------------------------------------------------------------
# Driving one engine tree
# -------------------------------------------------------------------------------------------------

def _load(path: Path | None) -> ModuleType:
    from hlo_doctor.engines import load_engine

    return load_engine(path)


def engine_config(module: ModuleType, settings: VerifySettings) -> Any:
    """The engine configuration for ``settings`` (fields the engine does not know are left out)."""
    config_cls = getattr(module, "EngineConfig", None)
    if config_cls is None or not dataclasses.is_dataclass(config_cls):
        raise InputError(f"engine {getattr(module, '__file__', module.__name__)} has no EngineConfig dataclass",
                         "see docs/verify.md for the driver interface an engine tree must expose")
    names = {f.name for f in dataclasses.fields(config_cls)}
    defaults = config_cls()  # type: ignore[operator]
    wanted: dict[str, Any] = {"max_tokens": settings.max_tokens, "seed": settings.seed,
                              "logprobs": settings.logprobs, "do_sampling": False,
                              # Verify counts compiles itself; a guard that raises would hide the figures.
                              "check_recompilation": False}
    if settings.vocab is not None:
        wanted["vocab_size"] = settings.vocab
    if settings.batch is not None:
        wanted["batch"] = settings.batch
        # The menu is built for every num_reqs bucket up to max_num_reqs, but a measured batch only
        # runs in its own bucket: stop the menu there (a smaller batch then warms up much faster).
        wanted["max_num_reqs"] = max(8, 1 << (settings.batch - 1).bit_length())
    config = dataclasses.replace(defaults, **{k: v for k, v in wanted.items() if k in names})
    validate = getattr(module, "validate", None)
    if validate is not None:
        try:
            validate(config)
        except ValueError as exc:
            raise InputError(f"invalid engine configuration: {exc}", "change --batch/--vocab/--max-tokens") from exc
    return config


class _Variant:
    """One loaded, warmed engine tree."""

    def __init__(self, label: str, source: str, module: ModuleType, config: Any) -> None:
        self.label = label
        self.source = source
        self.module = module
        self.config = config
        self.engine: Any = None
        self.warmup_s = 0.0
        self.tokens: list[np.ndarray] = []
        self.logprobs: list[np.ndarray | None] = []

    @property
    def rewarms(self) -> bool:
        """True when the tree has no OfflineEngine: each round goes through run_offline_batch."""
        return not hasattr(self.module, "OfflineEngine")

    def warmup(self) -> None:
        start = time.perf_counter()
        if self.rewarms:
            # One untimed batch so that the first measured round is not the process's first trace.
            self.module.run_offline_batch(self.config)
        else:
            self.engine = self.module.OfflineEngine(self.config)
            self.engine.warmup()
        self.warmup_s = time.perf_counter() - start

    @property
    def cold_rounds(self) -> bool:
        """True when every round starts as after an engine start (a menu miss then shows in every round)."""
        return self.rewarms or hasattr(self.engine, "restart_sampler")

    def before_round(self) -> None:
        """Outside the measured window: restart the sampler programs cold when the engine can."""
        restart = getattr(self.engine, "restart_sampler", None)
        if restart is not None:
            restart()

    def run_batch(self) -> Any:
        if self.rewarms:
            return self.module.run_offline_batch(self.config)
        return self.engine.run_batch()


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


# -------------------------------------------------------------------------------------------------
# Check 4: the treatment's own trace
# -------------------------------------------------------------------------------------------------

def argmax_reads(ctx: Any) -> tuple[str, ...]:
    """``module: dtype[dims]`` of the large tensor each argmax/argmin in ``ctx``'s modules reads.

    The bytes an argmax reads are those of its entry-level op's operands (on XLA:CPU a bf16 argmax
    fusion reads bf16 and widens in registers), so the dtype is read there, not from the reducer.
    """
    from hlo_doctor.diagnose import reduce_inputs, selection_reduces

    out: list[str] = []
    for module in ctx.modules:
        for op, inner, kind in selection_reduces(ctx, module):
            if kind not in ("argmax", "argmin"):
                continue
            data = module.instruction(reduce_inputs(inner)[0], inner.computation)
            elements = data.shape.num_elements if data is not None else 0
            operands = module.operands_of(op) if op is not inner else ([data] if data is not None else [])
            big = [o for o in operands if o.shape.num_elements == elements and not o.shape.is_tuple]
            for o in big or operands[:1]:
                dims = ",".join(str(d) for d in o.shape.dims)
                entry = f"{module.name}: {o.shape.dtype}[{dims}]"
                if entry not in out:
                    out.append(entry)
    return tuple(out)


def hlo_evidence(run_dir: Path) -> HloEvidence:
    """Diagnose a captured run with hlo-doctor's rules HD001-HD004 and read its argmax dtypes."""
    from hlo_doctor.diagnose import diagnose, load_context
    from hlo_doctor.rulebook import load_rulebook

    ctx = load_context(run_dir)
    diagnosis = diagnose(ctx, load_rulebook(), select=HLO_RULES)
    return HloEvidence(
        run_dir=str(run_dir), findings=diagnosis.findings, rules_run=diagnosis.rules_run,
        argmax_reads=argmax_reads(ctx), step_time_us=diagnosis.step_time_us, argmax_times=argmax_times(ctx),
    )


def argmax_times(ctx: Any) -> tuple[tuple[str, float], ...]:
    """(module, time per step in us) of the entry op that runs each argmax/argmin, where timed."""
    from hlo_doctor.diagnose import selection_reduces

    out: dict[str, float] = {}
    for module in ctx.modules:
        for op, _, kind in selection_reduces(ctx, module):
            if kind in ("argmax", "argmin") and module.name not in out:
                timing = ctx.op_timing(module, op.name)
                if timing is not None:
                    out[module.name] = timing.time_per_step_us
    return tuple(out.items())


def _capture_variant(variant: _Variant, settings: VerifySettings, run_dir: Path,
                     progress: ProgressFn | None) -> HloEvidence:
    """Profile a few decode steps of ``variant``'s own engine and diagnose what ran."""
    from hlo_doctor.capture import capture_callable

    profile_target = getattr(variant.module, "profile_target", None)
    if profile_target is None:
        return HloEvidence(str(run_dir), (), (), (), None,
                           error=f"{variant.label} engine has no profile_target(config): nothing to capture")
    try:
        target = profile_target(variant.config)
        describe = getattr(target, "describe", None)
        config = describe() if describe is not None else {}
        path = capture_callable(
            target.step, steps=settings.profile_steps, warmup=1, out_dir=run_dir,
            target=f"{variant.label}:{variant.source}", config=_jsonable(config), warmup_fn=target.warmup,
            progress=(lambda stage, done, total: progress(f"profile {variant.label}: {stage}", done, total))
            if progress else None,
        )
        return hlo_evidence(path)
    except HloDoctorError as exc:
        return HloEvidence(str(run_dir), (), (), (), None, error=exc.one_line())


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return json.loads(json.dumps(value, default=str))


def _check_hlo(evidence: HloEvidence | None) -> Check:
    name = "treatment HLO"
    if evidence is None:
        return Check(4, name, False, "not captured", "the treatment's trace was not captured")
    if evidence.error:
        return Check(4, name, False, "capture failed", evidence.error)
    missing = [c for c in HLO_RULES if c not in evidence.rules_run]
    if missing:
        return Check(4, name, False, f"rules not run: {', '.join(missing)}",
                     "the capture lacked what these rules need (HLO modules, op stats)")
    if not evidence.argmax_reads:
        return Check(4, name, False, "no argmax in trace",
                     "no greedy argmax was found in the captured programs: nothing sampled?")
    findings = failing_findings(evidence)
    reads = ", ".join(evidence.argmax_reads)
    wide = [r for r in evidence.argmax_reads if r.split(": ")[1].startswith(("f32[", "f64["))]
    if findings:
        codes = sorted({f.code for f in findings})
        what = "; ".join(f"{f.code} {f.op} {f.shape}" for f in findings[:4])
        return Check(4, name, False, f"{len(findings)} finding(s): {', '.join(codes)}", f"{what}; argmax reads {reads}")
    if wide:
        return Check(4, name, False, f"argmax reads {', '.join(wide)}",
                     "the argmax reads a widened tensor although no rule fired")
    return Check(4, name, True, f"0 findings; argmax reads {reads}",
                 "no aliasing copy, no standalone convert program, argmax reads the narrow dtype")


def failing_findings(evidence: HloEvidence) -> list[Finding]:
    """The findings that fail check 4: any aliasing copy (HD002) or standalone convert program (HD003),
    and a widening convert or over-wide read (HD001, HD004) in a program that holds an argmax.

    HD001/HD004 on other programs (the logprobs consumers, which do need float32) are reported but
    are not what this check is about: the argmax reading the narrow dtype.
    """
    argmax_modules = {entry.split(": ", 1)[0] for entry in evidence.argmax_reads}
    out = []
    for f in evidence.findings:
        if f.code in ("HD002", "HD003") or (f.code in ("HD001", "HD004") and f.module in argmax_modules):
            out.append(f)
    return out


def _removed_ops(baseline: HloEvidence | None, treatment: HloEvidence | None) -> tuple[RemovedOp, ...]:
    if baseline is None or baseline.error or treatment is None or treatment.error:
        return ()
    # Op names change between two compiles of a program; the rule and the program say what it was.
    still = {(f.code, f.module): f for f in treatment.findings}
    argmax = dict(treatment.argmax_times)
    seen: set[tuple[str, str]] = set()
    out: list[RemovedOp] = []
    for f in baseline.findings:
        if f.code not in HLO_RULES or (f.module, f.op) in seen:
            continue
        # Two rules can flag one op (HD001 and HD003 on the convert program): count its time once.
        seen.add((f.module, f.op))
        left = still.get((f.code, f.module))
        if left is not None:
            out.append(RemovedOp(f.code, f.op, f.module, f.shape, f.time_per_step_us, "still there",
                                 left.time_per_step_us))
        elif f.code in ("HD001", "HD004") and f.module in argmax:
            out.append(RemovedOp(f.code, f.op, f.module, f.shape, f.time_per_step_us, "narrowed", argmax[f.module]))
        else:
            out.append(RemovedOp(f.code, f.op, f.module, f.shape, f.time_per_step_us, "gone"))
    return tuple(out)


# -------------------------------------------------------------------------------------------------
# Checks 1-3 and 5
# -------------------------------------------------------------------------------------------------

def _check_compiles(baseline: VariantSummary, treatment: VariantSummary) -> Check:
    parts = []
    reasons: list[str] = []
    for v in (treatment, baseline):
        parts.append(f"{v.label} {v.compiles}")
        for r in v.rounds:
            if r.compiles:
                why = "; ".join(r.compile_reasons) or "JAX gave no reason"
                reasons.append(f"{v.label} round {r.index + 1}: {r.compiles} compile(s): {why}")
    figure = ", ".join(parts)
    if reasons:
        return Check(1, "steady-state compiles", False, figure, " | ".join(reasons))
    return Check(1, "steady-state compiles", True, figure, "every measured round ran on the precompiled menu")


def check_ttft(baseline: VariantSummary, treatment: VariantSummary, bound: float, *, cold: bool = True) -> Check:
    """Check 2: the batch TTFT ratio treatment/baseline against ``bound`` (medians; worst rounds too when warm)."""
    t_worst = max(r.batch_ttft_ms for r in treatment.rounds)
    b_worst = max(r.batch_ttft_ms for r in baseline.rounds)
    worst = _ratio(t_worst, b_worst)
    median = _ratio(treatment.median("batch_ttft_ms"), baseline.median("batch_ttft_ms"))
    detail = (f"median {treatment.median('batch_ttft_ms'):.1f} vs {baseline.median('batch_ttft_ms'):.1f} ms; "
              f"worst round {t_worst:.1f} vs {b_worst:.1f} ms")
    if cold:
        # Every round starts its sampler cold, so a menu miss compiles inside every round's prefill:
        # the medians carry it, and one scheduler hiccup of either side cannot decide the check.
        figure = f"x{median:.2f} median (bound {bound:.2f}); worst round x{worst:.2f}"
        return Check(2, "batch TTFT ratio", median <= bound, figure, detail)
    # Warm rounds: a miss compiles in the first round only, so the worst rounds must be compared too.
    figure = f"x{median:.2f} median, x{worst:.2f} worst round (bound {bound:.2f})"
    return Check(2, "batch TTFT ratio", max(worst, median) <= bound, figure, detail)


def _check_tokens(base: _Variant, treat: _Variant, logprobs: bool) -> Check:
    name = "greedy tokens identical" + (" + logprobs" if logprobs else "")
    pairs = list(zip(base.tokens, treat.tokens, strict=True))
    for i, (a, b) in enumerate(pairs):
        if a.shape != b.shape:
            return Check(3, name, False, f"shapes differ in round {i + 1}", f"{a.shape} vs {b.shape}")
        if not np.array_equal(a, b):
            diff = np.argwhere(a != b)
            req, step = (int(x) for x in diff[0])
            return Check(3, name, False, f"{len(diff)} of {a.size} tokens differ (round {i + 1})",
                         f"first at request {req}, token {step}: {int(a[req, step])} vs {int(b[req, step])}")
    shape = "x".join(str(d) for d in base.tokens[0].shape) if base.tokens else "0"
    figure = f"{shape} tokens identical in {len(pairs)}/{len(pairs)} rounds"
    if logprobs:
        for i, (lp_a, lp_b) in enumerate(zip(base.logprobs, treat.logprobs, strict=True)):
            if lp_a is None or lp_b is None:
                return Check(3, name, False, f"no logprobs in round {i + 1}", "logprobs were requested")
            a, b = lp_a, lp_b
            if a.dtype != np.float32 or b.dtype != np.float32:
                return Check(3, name, False, f"logprobs dtype {a.dtype}/{b.dtype}", "logprobs must be float32")
            if not np.array_equal(a, b):
                worst = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                return Check(3, name, False, f"logprobs differ (max |diff| {worst:.3g}, round {i + 1})",
                             "logprobs must be bit-identical")
        figure += "; logprobs f32, bit-identical"
    return Check(3, name, True, figure, "")


def _check_throughput(throughput: SampleComparison, step_time: SampleComparison, require_improvement: bool) -> Check:
    outcome = throughput.outcome
    ok = {Outcome.IMPROVED} if require_improvement else {Outcome.IMPROVED, Outcome.NO_CHANGE}
    passed = outcome in ok and step_time.outcome != Outcome.REGRESSED
    ci = ("" if math.isnan(throughput.ci_low) else f", CI [{throughput.ci_low:.3f}, {throughput.ci_high:.3f}]")
    figure = f"{str(outcome)}: x{throughput.ratio:.3f}{ci}; step time {str(step_time.outcome)} x{step_time.ratio:.3f}"
    detail = f"throughput: {throughput.reason}; step time: {step_time.reason}"
    return Check(5, "throughput verdict", passed, figure, detail)


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


# -------------------------------------------------------------------------------------------------
# The run
# -------------------------------------------------------------------------------------------------

def _validate_settings(settings: VerifySettings) -> None:
    if settings.rounds < 1:
        raise InputError(f"--rounds {settings.rounds}: need at least one round", "pass --rounds 5 or more")
    if settings.max_tokens < 2:
        raise InputError(f"--max-tokens {settings.max_tokens}: need at least 2 (one prefill, one decode step)",
                         "pass --max-tokens 16")
    if settings.batch is not None and settings.batch < 1:
        raise InputError(f"--batch {settings.batch}: must be positive", "pass --batch 64")
    if settings.vocab is not None and settings.vocab < 2:
        raise InputError(f"--vocab {settings.vocab}: must be at least 2", "pass --vocab 256000")
    if not settings.ttft_bound >= 1.0:
        raise InputError(f"--ttft-bound {settings.ttft_bound}: must be >= 1", "pass --ttft-bound 1.25")
    if settings.fix is None and settings.treatment is None:
        raise InputError("nothing to verify: no --fix and no --treatment",
                         "pass --fix bf16-greedy-sampler, or --treatment PATH (and --baseline PATH)")
    if settings.fix is not None and settings.baseline is not None and settings.treatment is not None:
        raise InputError("--fix with both --baseline and --treatment: the fix would not be used",
                         "drop --fix, or drop --treatment to verify the fix applied to --baseline")
    if settings.baseline_run is not None and not Path(settings.baseline_run).exists():
        raise InputError(f"--baseline-run {settings.baseline_run} does not exist",
                         "pass a run directory from 'hlo-doctor profile' of the baseline, or leave it out")
    for name, path in (("--baseline", settings.baseline), ("--treatment", settings.treatment)):
        if path is not None and not Path(path).is_dir():
            raise InputError(f"{name} {path} is not a directory", "pass an engine source tree (a copy of hlo_doctor/engine)")


def _shipped_engine_dir() -> Path:
    import hlo_doctor.engine as shipped

    return Path(shipped.__file__).resolve().parent


def run_verify(settings: VerifySettings, progress: ProgressFn | None = None) -> VerifyReport:
    """Warm both variants, run interleaved measured rounds, capture the treatment, decide the checks.

    Raises :class:`InputError` for unusable settings or trees (before anything is measured).
    """
    _validate_settings(settings)
    report = progress or (lambda stage, done, total: None)
    started = time.perf_counter()
    with _workspace(settings.out_dir) as work:
        baseline_dir = Path(settings.baseline).resolve() if settings.baseline else _shipped_engine_dir()
        fix_diff = ""
        if settings.treatment is not None:
            treatment_dir = Path(settings.treatment).resolve()
        else:
            assert settings.fix is not None
            treatment_dir, fix_diff = _make_treatment(settings.fix, settings.variant, baseline_dir, work)
        report("prepare", 0, 2)
        base_mod = _load(None if settings.baseline is None else baseline_dir)
        treat_mod = _load(treatment_dir)
        report("prepare", 2, 2)
        base = _Variant("baseline", str(baseline_dir), base_mod, engine_config(base_mod, settings))
        treat = _Variant("treatment", str(treatment_dir), treat_mod, engine_config(treat_mod, settings))
        return _measure(settings, base, treat, work, fix_diff, report, started)


@contextmanager
def _workspace(out_dir: Path | None) -> Iterator[Path]:
    if out_dir is not None:
        path = Path(out_dir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    tmp = Path(tempfile.mkdtemp(prefix="hlo-doctor-verify-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _make_treatment(fix: str, variant: str, baseline_dir: Path, work: Path) -> tuple[Path, str]:
    from hlo_doctor.fixes import FixApplied, apply_fix, patched_copy

    dest = work / f"treatment-{fix}-{variant}"
    if dest.exists():
        shutil.rmtree(dest)
    patched_copy(fix, baseline_dir, dest, variant=variant)
    # The diff of what the fix changed, from a dry run on the untouched baseline.
    result = apply_fix(fix, baseline_dir, variant=variant, dry_run=True)
    diff = result.diff if isinstance(result, FixApplied) else ""
    return dest, diff


def _measure(settings: VerifySettings, base: _Variant, treat: _Variant, work: Path, fix_diff: str,
             report: ProgressFn, started: float) -> VerifyReport:
    import jax

    counter = _CompileCounter()
    rounds: dict[str, list[RoundResult]] = {"baseline": [], "treatment": []}
    variants = {"baseline": base, "treatment": treat}
    notes: list[str] = []
    with counter.listening():
        for v in (base, treat):
            report(f"warm-up {v.label}", 0, 1)
            v.warmup()
            report(f"warm-up {v.label}", 1, 1)
        if base.rewarms or treat.rewarms:
            notes.append("an engine without OfflineEngine was driven by run_offline_batch: it re-warmed each round "
                         "(outside the measured window)")
        cold = base.cold_rounds and treat.cold_rounds
        if not cold:
            notes.append("the engine cannot restart its sampler cold between rounds (no restart_sampler): a menu miss "
                         "compiles in the first round only, and check 2 compares worst rounds")
        total = 2 * settings.rounds
        order = 0
        report("rounds", 0, total)
        for pair in range(settings.rounds):
            # AB, BA, AB...: neither variant always runs right after the other one.
            labels = ("baseline", "treatment") if pair % 2 == 0 else ("treatment", "baseline")
            for label in labels:
                v = variants[label]
                v.before_round()
                gc.collect()
                with counter.window() as compiled:
                    result = v.run_batch()
                tokens = np.asarray(result.tokens)
                v.tokens.append(tokens)
                lp = getattr(result, "logprobs", None)
                v.logprobs.append(None if lp is None else np.asarray(lp))
                engine_count = int(getattr(result, "steady_state_compiles", 0) or 0)
                reasons = tuple(getattr(result, "compile_reasons", ()) or ())
                count = max(len(compiled), engine_count) if not v.rewarms else engine_count
                if len(compiled) and not reasons:
                    reasons = tuple(f"{name}: no reason reported by the engine" for name in compiled)
                rounds[label].append(RoundResult(
                    variant=label, index=len(rounds[label]), order=order,
                    throughput_tok_s=float(result.throughput_tok_s), batch_ttft_ms=float(result.batch_ttft_ms),
                    tpot_ms=float(result.tpot_ms), step_times_ms=tuple(float(t) for t in result.step_times_ms),
                    compiles=count, compile_reasons=reasons, tokens_sha256=_sha256(tokens),
                ))
                order += 1
                report("rounds", order, total)
    summaries = {
        label: VariantSummary(label, v.source, v.module.__name__, v.warmup_s, tuple(rounds[label]))
        for label, v in variants.items()
    }
    b, t = summaries["baseline"], summaries["treatment"]

    # Check 4 (and the baseline's wasteful ops for the "removed" figure): capture after the rounds so
    # that the profiler cannot disturb a measured window.
    treat_hlo = _capture_variant(treat, settings, work / "treatment-run", report)
    if settings.baseline_run is not None:
        try:
            base_hlo = hlo_evidence(Path(settings.baseline_run))
        except HloDoctorError as exc:
            base_hlo = HloEvidence(str(settings.baseline_run), (), (), (), None, error=exc.one_line())
    else:
        base_hlo = _capture_variant(base, settings, work / "baseline-run", report)

    throughput = compare_samples([r.throughput_tok_s for r in b.rounds], [r.throughput_tok_s for r in t.rounds],
                                 min_effect=settings.min_effect, alpha=settings.alpha, lower_is_better=False,
                                 seed=settings.seed)
    step_time = compare_samples(b.step_times_ms, t.step_times_ms, min_effect=settings.min_effect,
                                alpha=settings.alpha, seed=settings.seed)
    ttft = compare_samples([r.batch_ttft_ms for r in b.rounds], [r.batch_ttft_ms for r in t.rounds],
                           min_effect=settings.min_effect, alpha=settings.alpha, seed=settings.seed)
    checks = (
        _check_compiles(b, t),
        check_ttft(b, t, settings.ttft_bound, cold=cold),
        _check_tokens(base, treat, settings.logprobs),
        _check_hlo(treat_hlo),
        _check_throughput(throughput, step_time, settings.require_improvement),
    )
    return VerifyReport(
        settings=settings, config=_jsonable(dataclasses.asdict(base.config)), baseline=b, treatment=t,
        checks=checks, throughput=throughput, step_time=step_time, ttft=ttft, treatment_hlo=treat_hlo,
        baseline_hlo=base_hlo, removed_ops=_removed_ops(base_hlo, treat_hlo), fix_diff=fix_diff,
        elapsed_s=time.perf_counter() - started, backend=jax.default_backend(), notes=tuple(notes),
    )


# -------------------------------------------------------------------------------------------------
# Renderers (strings; the CLI prints them)
# -------------------------------------------------------------------------------------------------

def render_json(report: VerifyReport) -> str:
    """The whole report as JSON."""
    return json.dumps(report.to_dict(), indent=2, default=str) + "\n"


def metric_rows(report: VerifyReport) -> list[tuple[str, str, str, str, str, str]]:
    """(metric, baseline, treatment, ratio, interval, outcome) rows: the table people read.

    Throughput, batch TTFT, TPOT and decode step are medians (over rounds; the decode step over every
    step of every round); ``removed ms/step`` and ``argmax ms/step`` come from the two captures.
    """
    b, t = report.baseline, report.treatment
    rows: list[tuple[str, str, str, str, str, str]] = []

    def cmp_row(name: str, comparison: SampleComparison | None, fmt: str) -> None:
        if comparison is None:
            return
        interval = ("-" if math.isnan(comparison.ci_low)
                    else f"[{comparison.ci_low:.3f}, {comparison.ci_high:.3f}]")
        rows.append((name, format(comparison.baseline_median, fmt), format(comparison.candidate_median, fmt),
                     f"x{comparison.ratio:.3f}", interval, str(comparison.outcome)))

    cmp_row("throughput tok/s", report.throughput, ",.1f")
    cmp_row("batch TTFT ms", report.ttft, ",.1f")
    t_worst = max(r.batch_ttft_ms for r in t.rounds)
    b_worst = max(r.batch_ttft_ms for r in b.rounds)
    rows.append(("TTFT worst round", f"{b_worst:,.1f}", f"{t_worst:,.1f}",
                 f"x{_ratio(t_worst, b_worst):.3f}", "-", ""))
    rows.append(("TPOT ms", f"{b.median('tpot_ms'):,.1f}", f"{t.median('tpot_ms'):,.1f}",
                 f"x{_ratio(t.median('tpot_ms'), b.median('tpot_ms')):.3f}", "-", ""))
    cmp_row("decode step ms", report.step_time, ",.1f")
    rows.append(("compiles", str(b.compiles), str(t.compiles), "-", "-", ""))
    removed = report.removed_time_per_step_us
    if removed is not None:
        rows.append(("removed ms/step", f"{removed / 1000:,.3f}", "0", "-", "-", "gone"))
    for o in report.removed_ops:
        if o.status == "narrowed" and o.time_per_step_us and o.treatment_time_per_step_us is not None:
            rows.append(("argmax ms/step", f"{o.time_per_step_us / 1000:,.3f}",
                         f"{o.treatment_time_per_step_us / 1000:,.3f}",
                         f"x{_ratio(o.treatment_time_per_step_us, o.time_per_step_us):.3f}", "-", "narrowed"))
    return rows


def render_markdown(report: VerifyReport) -> str:
    """The report as Markdown (a PR comment or a file beside the JSON)."""
    s = report.settings
    status = "PASS" if report.passed else "FAIL"
    lines = [f"## hlo-doctor verify: {status} ({report.verdict})", ""]
    what = f"fix `{s.fix}` ({s.variant})" if s.fix and s.treatment is None else "treatment tree"
    cfg = report.config
    lines.append(
        f"Baseline `{report.baseline.source}` vs {what} `{report.treatment.source}`; "
        f"{s.rounds} interleaved rounds per variant, batch {cfg.get('batch')}, vocab {cfg.get('vocab_size')}, "
        f"{cfg.get('max_tokens')} tokens per request, backend {report.backend}, {report.elapsed_s:.0f} s."
    )
    lines += ["", "| # | check | result | figure |", "|---|---|---|---|"]
    for c in report.checks:
        lines.append(f"| {c.number} | {c.name} | {'pass' if c.passed else '**FAIL**'} | {_md(c.figure)} |")
    details = [c for c in report.checks if c.detail]
    if details:
        lines.append("")
        lines += [f"- check {c.number} ({c.name}): {_md(c.detail)}" for c in details]
    lines += ["", "Medians over the rounds (decode step: over every step of every round); removed and argmax "
              "times from the captures.", "", "| metric | baseline | treatment | ratio | 95% interval | outcome |",
              "|---|---:|---:|---:|---|---|"]
    for row in metric_rows(report):
        lines.append("| " + " | ".join(_md(x) for x in row) + " |")
    if report.removed_ops:
        lines += ["", "Wasteful ops in the baseline's trace (hlo-doctor rules) and in the treatment's:", "",
                  "| rule | op | shape | baseline time/step | treatment time/step | in treatment |",
                  "|---|---|---|---:|---:|---|"]
        for o in report.removed_ops:
            lines.append(f"| {o.code} | {o.module}/{o.op} | `{o.shape}` | {fmt_us(o.time_per_step_us)} | "
                         f"{fmt_us(o.treatment_time_per_step_us) if o.status != 'gone' else '0 (gone)'} | {o.status} |")
    for note in report.notes:
        lines += ["", f"Note: {note}"]
    if report.fix_diff:
        lines += ["", "<details><summary>What the fix changed</summary>", "", "```diff", report.fix_diff.rstrip(),
                  "```", "</details>"]
    return "\n".join(lines) + "\n"


def fmt_us(us: float | None) -> str:
    """Microseconds for people: ``72.53 ms`` or ``480 us``; ``-`` for unknown."""
    if us is None:
        return "-"
    return f"{us / 1000:,.2f} ms" if us >= 1000 else f"{us:,.0f} us"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def first_failed(checks: Sequence[Check]) -> Check | None:
    """The first failing check, in check order (what a one-line summary names)."""
    return next((c for c in checks if not c.passed), None)
