"""The engine A/B: two engine source trees (the bundled reference engine, a patched copy, or any tree
with the driver interface) measured side by side in this process.

Both variants are loaded side by side, each under its own module name, each warmed up with its own
precompiled menu. Then measured rounds of the offline batch run interleaved (AB, BA, AB, ...), with
the backend compiles inside every round counted. Five checks decide the verdict:

1. **compiles**: no backend compile inside any measured round, in either variant (with JAX's
   cache-miss reason when there is one). A compile there means a call missed the precompiled menu.
2. **batch TTFT**: the treatment's batch TTFT over the baseline's, fastest round against fastest
   round, is at most ``ttft_bound`` (default 1.25). Every round starts the engine's sampler programs
   cold (``restart_sampler()``, outside the measured window), as after an engine start, so a menu miss
   compiles inside every round's prefill and stays in the fastest round, while load only adds time.
   (An engine without that hook runs warm rounds: a miss compiles in the first round only, and the
   worst rounds and the medians are compared.)
3. **tokens**: greedy tokens identical between variants in every round; logprobs (when requested)
   bit-identical and float32.
4. **treatment HLO**: the treatment's own captured trace, diagnosed by hlo-doctor's rules, has no
   aliasing copy (HD002), no standalone convert program (HD003), no widening convert before the
   argmax (HD001) and no over-wide read (HD004), and its argmax reads the model's narrow dtype.
   This looks at what ran, not at any setting of the treatment.
5. **step time**: the decode step times with rounds as blocks (each round's trimmed mean, compared
   within its AB/BA pair, a t-test over the pairs: :func:`hlo_doctor.verify.stats.compare_blocks`):
   improved / no change / regressed / inconclusive; the per-round throughput, paired the same way,
   must not regress. It passes on improved or no change (``require_improvement`` makes no change
   fail). With ``budget_s``, pairs are added until it decides or the budget is spent.

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
