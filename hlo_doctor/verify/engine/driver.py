"""The engine driver interface as types: what verify reads of an engine tree it loads.

A tree is loaded at run time under a name of its own (:func:`hlo_doctor.engines.load_engine`), so
its classes are not importable here; these Protocols say what verify relies on (docs/verify.md,
"The driver interface"). Optional parts (``restart_sampler``, ``logprobs``,
``steady_state_compiles``, ``compile_reasons``, ``profile_target``) are read with ``getattr``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import Field
from typing import Any, ClassVar, Protocol

from numpy.typing import ArrayLike


class EngineConfig(Protocol):
    """A tree's ``EngineConfig``: a dataclass (the report keeps it with ``dataclasses.asdict``)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


class BatchResult(Protocol):
    """What one offline batch of a tree returns (``OfflineEngine.run_batch`` / ``run_offline_batch``)."""

    @property
    def tokens(self) -> ArrayLike: ...

    @property
    def throughput_tok_s(self) -> float: ...

    @property
    def batch_ttft_ms(self) -> float: ...

    @property
    def tpot_ms(self) -> float: ...

    @property
    def step_times_ms(self) -> Sequence[float]: ...


class OfflineEngine(Protocol):
    """A tree's ``OfflineEngine(config)``: warmed up once, then one batch per measured round."""

    def warmup(self) -> None: ...

    def run_batch(self) -> BatchResult: ...
