"""Same-session A/B verification of a change: does it help, and does it stay on the precompiled graphs?

The A/B core is shared by every kind of target:

- ``settings``: the defaults, the rules of the HLO check, the checks of the settings every target has;
- ``rounds``: the interleaved order of the measured rounds (AB, BA, AB, ...), and pairs added until
  check 5 decides within a time budget;
- ``compiles``: the one compile counter (backend compiles inside a measured window, with JAX's reason);
- ``stats``: the statistics every figure goes through (:mod:`hlo_doctor.statistics`, and the paired
  rounds that decide check 5);
- ``checks``: the checks every target shares (the step-time and throughput verdicts, a check that could
  not run);
- ``results``: the frozen values every target reports (``Check``, ``HloEvidence``, ``RemovedOp``,
  ``Stopping``);
- ``evidence``: a captured run diagnosed by hlo-doctor's rules;
- ``workspace``: the folder a run writes to.

One subpackage per kind of target, each importing the core and never the other way round:

- :mod:`hlo_doctor.verify.engine`: two engine source trees (the bundled reference engine and a
  patched copy, or any tree with the driver interface) -> :class:`VerifyReport`;
- :mod:`hlo_doctor.verify.tpu_inference`: ``verify --target``, a tpu-inference tree's real
  ``sample()`` against its patched copy, and ``--bench`` (the serving level) -> ``TargetReport``.

Renderers live in :mod:`hlo_doctor.render` (:mod:`~hlo_doctor.render.verify`,
:mod:`~hlo_doctor.render.verify_target`). This package re-exports the engine A/B's API, which
``hlo-doctor verify`` and ``hlo-doctor doctor`` run by default.
"""

from __future__ import annotations

from hlo_doctor.verify.checks import first_failed
from hlo_doctor.verify.compiles import BACKEND_COMPILE_EVENT
from hlo_doctor.verify.engine import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROFILE_STEPS,
    RoundResult,
    VariantSummary,
    VerifyReport,
    VerifySettings,
    engine_config,
    run_verify,
)
from hlo_doctor.verify.engine.checks import check_ttft, failing_findings
from hlo_doctor.verify.evidence import argmax_reads, hlo_evidence
from hlo_doctor.verify.results import Check, HloEvidence, RemovedOp
from hlo_doctor.verify.settings import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_EFFECT,
    DEFAULT_ROUNDS,
    DEFAULT_TTFT_BOUND,
    HLO_RULES,
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
