"""Engine configuration and its validation (before anything is compiled)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

# The smallest num_reqs padding bucket, as in the serving stack this engine mirrors.
MIN_NUM_REQS = 8


class EngineConfigError(ValueError):
    """An impossible engine configuration: ``what`` names it, ``hint`` says what to change."""

    def __init__(self, what: str, hint: str = "") -> None:
        super().__init__(f"{what} - {hint}" if hint else what)
        self.what = what
        self.hint = hint


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Sizes and serving settings of the reference decode engine.

    The defaults keep the real Gemma vocabulary (256,000) and a batch of 64 so that the sampling
    tail has the shape of the upstream report, with a small hidden size and two layers so that a
    whole profile (compile, warm-up, capture) fits in well under two minutes on a 2-core CPU.
    """

    vocab_size: int = 256000
    hidden_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 1
    head_dim: int = 64
    mlp_dim: int = 1024
    max_num_reqs: int = 64
    batch: int = 64
    prompt_len: int = 16
    max_tokens: int = 16
    seed: int = 0
    do_sampling: bool = False
    logprobs: bool = False
    max_logprobs: int = 5
    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.8
    check_recompilation: bool = dataclasses.field(
        default_factory=lambda: _env_flag("HLO_DOCTOR_CHECK_RECOMPILATION")
    )
    """Raise inside guarded calls when a program compiles after warm-up (``HLO_DOCTOR_CHECK_RECOMPILATION=1``)."""

    @property
    def num_reqs_paddings(self) -> tuple[int, ...]:
        """The num_reqs padding buckets: powers of two from 8 up to ``max_num_reqs`` (included)."""
        buckets: list[int] = []
        num = MIN_NUM_REQS
        while num < self.max_num_reqs:
            buckets.append(num)
            num *= 2
        buckets.append(self.max_num_reqs)
        return tuple(buckets)

    @property
    def padded_num_reqs(self) -> int:
        """The bucket this config's batch runs in."""
        return next(b for b in self.num_reqs_paddings if b >= self.batch)

    @property
    def max_model_len(self) -> int:
        """KV-cache length: the prompt plus every generated token."""
        return self.prompt_len + self.max_tokens


def validate(config: EngineConfig) -> EngineConfig:
    """Check ``config`` before any compile; raise :class:`EngineConfigError` naming the first problem."""
    positive = (
        "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
        "mlp_dim", "max_num_reqs", "batch", "prompt_len", "max_tokens",
    )
    for name in positive:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise EngineConfigError(f"engine config: {name}={value!r} must be a positive integer",
                                    f"give {name} >= 1")
    if config.max_num_reqs < MIN_NUM_REQS:
        raise EngineConfigError(f"engine config: max_num_reqs={config.max_num_reqs} is below the smallest "
                                f"bucket ({MIN_NUM_REQS})", f"give max_num_reqs >= {MIN_NUM_REQS}")
    if config.batch > config.max_num_reqs:
        raise EngineConfigError(
            f"engine config: batch={config.batch} is above the largest num_reqs bucket "
            f"({config.max_num_reqs}); the precompiled menu has no program for it",
            f"use --batch <= {config.max_num_reqs} or raise max_num_reqs")
    if config.num_heads % config.num_kv_heads:
        raise EngineConfigError(
            f"engine config: num_heads={config.num_heads} is not a multiple of num_kv_heads={config.num_kv_heads}",
            "choose num_kv_heads dividing num_heads")
    if config.max_logprobs <= 0 or config.max_logprobs > config.vocab_size:
        raise EngineConfigError(
            f"engine config: max_logprobs={config.max_logprobs} must be in 1..vocab_size ({config.vocab_size})",
            "lower max_logprobs")
    if config.do_sampling:
        if not config.temperature > 0:
            raise EngineConfigError(f"engine config: temperature={config.temperature} must be > 0 when sampling",
                                    "give a positive temperature or decode greedily")
        if config.top_k < 0 or config.top_k > config.vocab_size:
            raise EngineConfigError(f"engine config: top_k={config.top_k} must be in 0..vocab_size "
                                    f"({config.vocab_size}); 0 disables it", "lower top_k")
        if not 0.0 < config.top_p <= 1.0:
            raise EngineConfigError(f"engine config: top_p={config.top_p} must be in (0, 1]", "give 0 < top_p <= 1")
    return config
