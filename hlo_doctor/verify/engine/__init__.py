"""The engine A/B: two engine source trees (the bundled reference engine, a patched copy, or any tree
with the driver interface) measured side by side in this process.

Both variants are loaded side by side, each under its own module name, each warmed up with its own
precompiled menu. Then measured rounds of the offline batch run interleaved (AB, BA, AB, ...), with
the backend compiles inside every round counted. Five checks decide the verdict:

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

Files: ``settings`` (what to measure), ``driver`` (what verify reads of a tree, as Protocols),
``variants`` (loading, warming and rounds of one tree), ``capture`` (check 4's capture),
``checks`` (checks 1-4), ``results`` (the frozen values) and ``run`` (the orchestration).

The engine driver interface (what a tree must expose; the bundled engine does) is documented in
``docs/verify.md``: ``EngineConfig`` (a dataclass with ``vocab_size``, ``batch``, ``max_tokens``,
``logprobs``...), ``validate(config)``, ``OfflineEngine(config)`` with ``warmup()`` and
``run_batch()`` returning a ``BatchResult``, and ``profile_target(config)`` for check 4. A tree
without ``OfflineEngine`` is driven through ``run_offline_batch(config)`` per round, which warms up
again each time (slower, same figures: warm-up is outside every measured window).
"""

from __future__ import annotations

from hlo_doctor.verify.engine.results import RoundResult, VariantSummary, VerifyReport
from hlo_doctor.verify.engine.run import run_verify
from hlo_doctor.verify.engine.settings import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROFILE_STEPS,
    VerifySettings,
    engine_config,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_PROFILE_STEPS",
    "RoundResult",
    "VariantSummary",
    "VerifyReport",
    "VerifySettings",
    "engine_config",
    "run_verify",
]
