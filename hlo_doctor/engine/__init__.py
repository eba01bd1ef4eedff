"""The bundled reference decode engine: a small Gemma-shaped JAX decoder served the way
tpu-inference serves it (eager logits widening, jitted ``sample``, a precompiled menu keyed on the
logits dtype, a recompilation guard), so that the profile -> diagnose -> apply-fix -> verify -> gate
loop runs on any machine.

Modules import each other relatively only: a copied or patched tree loads under another package
name beside this one (see ``hlo_doctor.engines.load_engine``).
"""

from __future__ import annotations

from .compilation_manager import CompilationManager, MenuEntry
from .config import EngineConfig, EngineConfigError, validate
from .driver import (
    BatchResult,
    OfflineEngine,
    StepTarget,
    describe_engine,
    make_prompts,
    profile_target,
    run_offline_batch,
)
from .recompilation import CompileWatch, ForbidCompile, RecompilationError
from .runner import ModelRunner, SamplerOutput
from .sampling import compute_and_gather_logprobs, sample
from .sampling_metadata import TPUSupportedSamplingMetadata

__all__ = [
    "BatchResult",
    "CompilationManager",
    "CompileWatch",
    "EngineConfig",
    "EngineConfigError",
    "ForbidCompile",
    "MenuEntry",
    "ModelRunner",
    "OfflineEngine",
    "RecompilationError",
    "SamplerOutput",
    "StepTarget",
    "TPUSupportedSamplingMetadata",
    "compute_and_gather_logprobs",
    "describe_engine",
    "make_prompts",
    "profile_target",
    "run_offline_batch",
    "sample",
    "validate",
]
