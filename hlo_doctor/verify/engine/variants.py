"""One variant of a verify run: its engine tree (loaded, or made by a fix), its warm-up and its rounds."""

from __future__ import annotations

import gc
import hashlib
import shutil
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from hlo_doctor.engines import load_engine
from hlo_doctor.engines.session import call_with_progress
from hlo_doctor.verify.compiles import compile_window
from hlo_doctor.verify.engine.driver import BatchResult, EngineConfig, OfflineEngine
from hlo_doctor.verify.engine.results import RoundResult
from hlo_doctor.verify.engine.settings import VerifySettings, engine_config
from hlo_doctor.verify.settings import ProgressFn


class Variant:
    """One loaded, warmed engine tree."""

    def __init__(self, label: str, source: str, module: ModuleType, config: EngineConfig) -> None:
        self.label = label
        self.source = source
        self.module = module
        self.config = config
        self.engine: OfflineEngine | None = None
        self.warmup_s = 0.0
        self.tokens: list[np.ndarray] = []
        self.logprobs: list[np.ndarray | None] = []

    @property
    def rewarms(self) -> bool:
        """True when the tree has no OfflineEngine: each round goes through run_offline_batch."""
        return not hasattr(self.module, "OfflineEngine")

    def warmup(self, progress: ProgressFn | None = None) -> None:
        """Start the engine (or run one untimed batch); its precompile is reported to ``progress``."""
        start = time.perf_counter()
        if self.rewarms:
            # One untimed batch so that the first measured round is not the process's first trace.
            call_with_progress(self.module.run_offline_batch, progress, self.config)
        else:
            self.engine = self.module.OfflineEngine(self.config)
            call_with_progress(self.engine.warmup, progress)
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

    def run_batch(self) -> BatchResult:
        """One offline batch of the tree (the measured part of a round)."""
        if self.rewarms:
            result: BatchResult = self.module.run_offline_batch(self.config)
            return result
        assert self.engine is not None, "warmup() starts the engine before any round"
        return self.engine.run_batch()

    def measure_round(self, index: int, order: int) -> RoundResult:
        """One measured offline batch, with the backend compiles inside it counted."""
        self.before_round()
        gc.collect()
        with compile_window() as window:
            result = self.run_batch()
        compiled = window.programs
        tokens = np.asarray(result.tokens)
        self.tokens.append(tokens)
        lp = getattr(result, "logprobs", None)
        self.logprobs.append(None if lp is None else np.asarray(lp))
        engine_count = int(getattr(result, "steady_state_compiles", 0) or 0)
        reasons = tuple(getattr(result, "compile_reasons", ()) or ())
        count = max(len(compiled), engine_count) if not self.rewarms else engine_count
        if len(compiled) and not reasons:
            reasons = tuple(f"{name}: no reason reported by the engine" for name in compiled)
        return RoundResult(
            variant=self.label, index=index, order=order,
            throughput_tok_s=float(result.throughput_tok_s), batch_ttft_ms=float(result.batch_ttft_ms),
            tpot_ms=float(result.tpot_ms), step_times_ms=tuple(float(t) for t in result.step_times_ms),
            compiles=count, compile_reasons=reasons, tokens_sha256=_sha256(tokens),
        )


def load_variant(label: str, source: Path, settings: VerifySettings, *, bundled: bool = False) -> Variant:
    """The engine tree at ``source`` loaded under a name of its own and configured for ``settings``.

    ``bundled``: ``source`` is the installed reference engine, used as the package it is.
    """
    module = load_engine(None if bundled else source)
    return Variant(label, str(source), module, engine_config(module, settings))


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def make_treatment(fix: str, variant: str, baseline_dir: Path, work: Path) -> tuple[Path, str]:
    """A patched copy of ``baseline_dir`` under ``work`` and the diff the fix makes."""
    from hlo_doctor.fixes import FixApplied, apply_fix, patched_copy

    dest = work / f"treatment-{fix}-{variant}"
    if dest.exists():
        shutil.rmtree(dest)
    patched_copy(fix, baseline_dir, dest, variant=variant)
    # The diff of what the fix changed, from a dry run on the untouched baseline.
    result = apply_fix(fix, baseline_dir, variant=variant, dry_run=True)
    diff = result.diff if isinstance(result, FixApplied) else ""
    return dest, diff


def shipped_engine_dir() -> Path:
    """The bundled reference engine's source directory."""
    import hlo_doctor.engine as shipped

    return Path(shipped.__file__).resolve().parent
