"""Engine trees: loading one under a name of its own (``loader``) and configuring and capturing it
(``session``), the one path that ``profile``, ``verify`` and ``doctor`` share."""

from __future__ import annotations

from hlo_doctor.engines.loader import ENGINE_API, ENGINE_FILES, engine_source_dir, load_engine
from hlo_doctor.engines.session import (
    EngineTarget,
    batch_bucket,
    call_with_progress,
    capture_engine,
    checked_config,
    config_fields,
    engine_config,
    engine_target,
)

__all__ = ["ENGINE_API", "ENGINE_FILES", "EngineTarget", "batch_bucket", "call_with_progress", "capture_engine", "checked_config", "config_fields",
           "engine_config", "engine_target", "engine_source_dir", "load_engine"]
