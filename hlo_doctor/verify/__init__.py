"""Same-session A/B verification of a fix: does it help, and does it stay on the precompiled graphs?

Both variants (baseline and treatment engine source trees) are loaded side by side in this process,
each under its own module name, each warmed up with its own precompiled menu. Then measured rounds
of the offline batch run interleaved (AB, BA, AB, ...: the order alternates per pair so that neither
variant always runs first), with the backend compiles inside every round counted by
``jax.monitoring``. Five checks decide the verdict:

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

Files: ``settings`` (what to measure), ``variants`` (loading, warming and rounds of one tree),
``compiles`` (the compile counter), ``evidence`` (check 4's capture), ``checks`` (the five checks),
``results`` (the frozen values) and ``run`` (the orchestration); renderers live in
:mod:`hlo_doctor.render.verify`.

The engine driver interface (what a tree must expose; the bundled engine does) is documented in
``docs/verify.md``: ``EngineConfig`` (a dataclass with ``vocab_size``, ``batch``, ``max_tokens``,
``logprobs``...), ``validate(config)``, ``OfflineEngine(config)`` with ``warmup()`` and
``run_batch()`` returning a ``BatchResult``, and ``profile_target(config)`` for check 4. A tree
without ``OfflineEngine`` is driven through ``run_offline_batch(config)`` per round, which warms up
again each time (slower, same figures: warm-up is outside every measured window).
"""

from __future__ import annotations

from hlo_doctor.verify.checks import check_ttft, failing_findings, first_failed
from hlo_doctor.verify.compiles import BACKEND_COMPILE_EVENT
from hlo_doctor.verify.evidence import argmax_reads, hlo_evidence
from hlo_doctor.verify.results import Check, HloEvidence, RemovedOp, RoundResult, VariantSummary, VerifyReport
from hlo_doctor.verify.run import run_verify
from hlo_doctor.verify.settings import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MIN_EFFECT,
    DEFAULT_PROFILE_STEPS,
    DEFAULT_ROUNDS,
    DEFAULT_TTFT_BOUND,
    HLO_RULES,
    VerifySettings,
    engine_config,
)

__all__ = [
    "BACKEND_COMPILE_EVENT",
    "DEFAULT_ALPHA",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MIN_EFFECT",
    "DEFAULT_PROFILE_STEPS",
    "DEFAULT_ROUNDS",
    "DEFAULT_TTFT_BOUND",
    "HLO_RULES",
    "Check",
    "HloEvidence",
    "RemovedOp",
    "RoundResult",
    "VariantSummary",
    "VerifyReport",
    "VerifySettings",
    "argmax_reads",
    "check_ttft",
    "engine_config",
    "failing_findings",
    "first_failed",
    "hlo_evidence",
    "run_verify",
]
