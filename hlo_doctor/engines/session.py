"""Configuring and capturing a loaded engine: the one path that profile, verify and doctor take.

``engine_config`` builds an engine's ``EngineConfig`` from the fields a command sets, over the
engine's own defaults, and validates it; ``engine_target`` wraps the engine's ``profile_target``
so that the run metadata (the engine's ``describe()``, which knows the precompiled menu only after
warm-up) is filled in by the warm-up; ``capture_engine`` captures a few decode steps of it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.format import json_safe
from hlo_doctor.core.model import ProgressFn

__all__ = ["EngineTarget", "batch_bucket", "call_with_progress", "capture_engine", "checked_config", "config_fields",
           "engine_config", "engine_target"]


def batch_bucket(batch: int) -> int:
    """The num_reqs bucket a batch of ``batch`` requests runs in (powers of two from 8): where a
    precompiled menu built for one measured batch can stop. The menu holds every bucket up to
    ``max_num_reqs``, but a batch only ever runs in its own, so the buckets above it are compile time
    that no captured or timed step uses (the bundled engine's warm-up at batch 8: 10 programs, not 37)."""
    return max(8, 1 << (batch - 1).bit_length())


def config_fields(engine: ModuleType) -> frozenset[str]:
    """The field names of ``engine.EngineConfig`` (an :class:`InputError` when it is no dataclass)."""
    config_cls = getattr(engine, "EngineConfig", None)
    if config_cls is None or not dataclasses.is_dataclass(config_cls):
        raise InputError(f"engine {getattr(engine, '__file__', engine.__name__)} has no EngineConfig dataclass",
                         "see docs/verify.md for the driver interface an engine tree must expose")
    return frozenset(f.name for f in dataclasses.fields(config_cls))


def engine_config(engine: ModuleType, fields: Mapping[str, Any], *, strict: bool = False) -> Any:
    """``engine.EngineConfig`` with ``fields`` set over its defaults, validated by ``engine.validate``.

    ``strict``: a field the config does not have is an :class:`InputError` (a command option that
    would otherwise be ignored); otherwise it is left out (verify sets what each tree has). An
    impossible configuration is an :class:`InputError` (exit 2): the engine's own ``what``/``hint``
    when its error carries them, else the error's text.
    """
    known = config_fields(engine)
    unknown = sorted(set(fields) - known)
    if strict and unknown:
        raise InputError(f"engine config: unexpected field(s) {', '.join(unknown)}",
                         "see `hlo-doctor engine run --help` for the options")
    config = engine.EngineConfig(**{k: v for k, v in fields.items() if k in known})
    validate = getattr(engine, "validate", None)
    if validate is None:
        return config
    try:
        checked = validate(config)
    except ValueError as exc:
        what, hint = getattr(exc, "what", None), getattr(exc, "hint", None)
        if isinstance(what, str):
            raise InputError(what, hint or "change the engine's sizes") from exc
        raise InputError(f"invalid engine configuration: {exc}", "change --batch/--vocab/--max-tokens") from exc
    return config if checked is None else checked


def checked_config(engine: ModuleType, **fields: Any) -> Any:
    """``engine_config(engine, fields, strict=True)``: every field must exist in the engine's config."""
    return engine_config(engine, fields, strict=True)


@dataclass(frozen=True, slots=True)
class EngineTarget:
    """An engine's decode step as a capture target."""

    step: Callable[[], Any]
    warmup: Callable[[ProgressFn | None], None]
    """``warmup(progress)`` builds the engine (parameters, precompiled menu, prefill) and then records
    ``metadata``; the engine reports its precompile to ``progress`` as ``("precompile", done, total)``."""
    name: str
    """How run.json names the target (``engine`` or ``engine:PATH``)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The engine's ``describe()`` after warm-up (config, menu size), JSON-safe; filled by ``warmup``."""


def engine_target(engine: ModuleType, config: Any, name: str) -> EngineTarget:
    """``engine.profile_target(config)`` as an :class:`EngineTarget`."""
    target = engine.profile_target(config)
    metadata: dict[str, Any] = {}

    def warmup(progress: ProgressFn | None = None) -> None:
        call_with_progress(target.warmup, progress)
        # After warm-up the engine can say what it built (its precompiled menu): record that.
        describe = getattr(target, "describe", None)
        if describe is not None:
            metadata.update(json_safe(dict(describe())))

    return EngineTarget(step=target.step, warmup=warmup, name=name, metadata=metadata)


def capture_engine(engine: ModuleType, config: Any, *, name: str, out_dir: Path, steps: int, warmup: int = 1,
                   progress: ProgressFn | None = None) -> Path:
    """Capture ``steps`` decode steps of ``engine`` at ``config`` into the run directory ``out_dir``."""
    from hlo_doctor.capture import capture_callable

    target = engine_target(engine, config, name)
    return capture_callable(target.step, steps=steps, warmup=warmup, out_dir=out_dir, target=target.name,
                            config=target.metadata, warmup_fn=lambda: target.warmup(progress), progress=progress)


def call_with_progress(fn: Callable[..., Any], progress: ProgressFn | None, *args: Any) -> Any:
    """``fn(*args, progress=progress)`` when ``fn`` takes ``progress`` (the bundled engine's warm-ups
    do), else ``fn(*args)``: an engine tree whose warm-up reports nothing still runs."""
    try:
        takes = "progress" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        takes = False
    return fn(*args, progress=progress) if takes and progress is not None else fn(*args)
