"""What the engine A/B runs on and how hard it measures: :class:`VerifySettings`, their validation,
and the engine configuration both variants run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.engines.session import batch_bucket
from hlo_doctor.engines.session import engine_config as configure
from hlo_doctor.verify import settings as shared
from hlo_doctor.verify.engine.driver import EngineConfig

DEFAULT_MAX_TOKENS = 16
DEFAULT_PROFILE_STEPS = 3


@dataclass(frozen=True, slots=True)
class VerifySettings:
    """What to verify and how hard to measure it."""

    fix: str | None = None
    """A bundled fix id; the treatment is a patched copy of the baseline when no treatment is given."""
    variant: str = "full"
    baseline: Path | None = None
    """Engine source tree of the baseline; None = the bundled reference engine as shipped."""
    treatment: Path | None = None
    rounds: int = shared.DEFAULT_ROUNDS
    """Measured rounds per variant."""
    batch: int | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    vocab: int | None = None
    logprobs: bool = False
    ttft_bound: float = shared.DEFAULT_TTFT_BOUND
    min_effect: float = shared.DEFAULT_MIN_EFFECT
    alpha: float = shared.DEFAULT_ALPHA
    require_improvement: bool = False
    profile_steps: int = DEFAULT_PROFILE_STEPS
    """Decode steps captured for check 4 (and for the baseline's removed ops)."""
    out_dir: Path | None = None
    """Where run directories of check 4 and the patched treatment go; None = a temporary folder."""
    seed: int = 0
    budget_s: float | None = None
    """Seconds the measured rounds may take in all: after ``rounds`` pairs, pairs are added until check
    5 decides or the next pair would not fit (None: exactly ``rounds``)."""
    baseline_run: Path | None = None
    """An existing capture of the baseline at the same sizes (``hlo-doctor doctor``'s profile): used for
    the removed-ops figure instead of capturing the baseline again."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k in ("baseline", "treatment", "out_dir", "baseline_run"):
            d[k] = None if d[k] is None else str(d[k])
        return d


def engine_config(module: ModuleType, settings: VerifySettings) -> EngineConfig:
    """The engine configuration for ``settings`` (fields the engine does not know are left out)."""
    wanted: dict[str, Any] = {"max_tokens": settings.max_tokens, "seed": settings.seed,
                              "logprobs": settings.logprobs, "do_sampling": False,
                              # Verify counts compiles itself; a guard that raises would hide the figures.
                              "check_recompilation": False}
    if settings.vocab is not None:
        wanted["vocab_size"] = settings.vocab
    if settings.batch is not None:
        wanted["batch"] = settings.batch
        wanted["max_num_reqs"] = batch_bucket(settings.batch)
    return configure(module, wanted)


def validate_settings(settings: VerifySettings) -> None:
    """Raise :class:`InputError` for settings that cannot be measured (before anything is loaded)."""
    shared.check_rounds(settings.rounds)
    if settings.max_tokens < 2:
        raise InputError(f"--max-tokens {settings.max_tokens}: need at least 2 (one prefill, one decode step)",
                         "pass --max-tokens 16")
    if settings.batch is not None and settings.batch < 1:
        raise InputError(f"--batch {settings.batch}: must be positive", "pass --batch 64")
    if settings.vocab is not None and settings.vocab < 2:
        raise InputError(f"--vocab {settings.vocab}: must be at least 2", "pass --vocab 256000")
    shared.check_ttft_bound(settings.ttft_bound)
    shared.check_budget(settings.budget_s)
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
