"""What ``verify --target`` compares and how hard it measures: :class:`TargetSettings` and their checks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.verify import settings as shared


@dataclass(frozen=True, slots=True)
class TargetSettings:
    """What ``verify --target`` compares and how hard it measures."""

    target: Path
    treatment: Path | None = None
    fix: str = "bf16-greedy-sampler"
    variant: str = "full"
    rounds: int = shared.DEFAULT_ROUNDS
    steps: int = 8
    """Sampling steps per program-level round."""
    batch: int = 16
    vocab: int = 2048
    logprobs: bool = False
    ttft_bound: float = shared.DEFAULT_TTFT_BOUND
    min_effect: float = shared.DEFAULT_MIN_EFFECT
    alpha: float = shared.DEFAULT_ALPHA
    seed: int = 0
    out_dir: Path | None = None
    bench: str | None = None
    """A command with ``{tree}`` and ``{out}``: the serving level."""
    bench_rounds: int | None = None
    bench_timeout: float = 1800.0
    bench_metrics: tuple[tuple[str, str], ...] = ()
    without_compiler_options: bool = False
    """Jit ``sample()``'s body without the release's TPU compiler options when this backend rejects them."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k in ("target", "treatment", "out_dir"):
            d[k] = None if d[k] is None else str(d[k])
        d["bench_metrics"] = dict(self.bench_metrics)
        return d


def validate_target_settings(settings: TargetSettings) -> None:
    """Raise :class:`InputError` for settings that cannot be measured."""
    shared.check_rounds(settings.rounds)
    if settings.batch < 1 or settings.vocab < 2:
        raise InputError(f"--batch {settings.batch} --vocab {settings.vocab}: too small", "pass --batch 16 --vocab 2048")
    shared.check_ttft_bound(settings.ttft_bound)
    if settings.bench is not None and ("{tree}" not in settings.bench or "{out}" not in settings.bench):
        raise InputError(f"--bench {settings.bench!r} lacks the {{tree}} or {{out}} placeholder",
                         "write the command with {tree} (the tree to run) and {out} (the JSON it writes)")
