"""The ``bf16-greedy-sampler`` fix: greedy sampling on the model-dtype logits, with the precompile
menu rekeyed in the same change.

Three parts, applied together or not at all:

1. runner (``_sample_from_logits``): the eager ``logits = logits.astype(float32)`` right before the
   ``sample(...)`` call of the non-speculative path is dropped (it was its own program, a standalone
   convert), and the unconditional widening after sampling becomes ``if <metadata>.logprobs:``;
2. sampler (``sample``): the argmax reads the incoming logits (model dtype) and the single widening
   inside ``sample()`` is what the greedy branch returns, so the output is a fresh convert and no
   longer an entry parameter: XLA has no aliasing copy to insert. With the ``full`` variant
   ``sample()`` also returns no logits when logprobs are off (``logprobs`` is a static field, so every
   menu entry stays one program), and then no float32 logits are materialized at all;
3. precompile (``_precompile_sampling``): the dummy logits take the model dtype, so the precompiled
   menu is keyed on what the runner now passes. The logprobs menu (``_precompile_gather_logprobs``)
   stays float32: every value that reaches a logprobs consumer is still float32 (sample()'s own
   output, or the runner's widening that now runs under ``if logprobs``).

Each part is made of elements that are found in a tree as ``original``, ``fixed`` or ``missing``;
that is what tells a clean tree, a fixed one, a half-fixed one and one that does not match apart.
"""

from __future__ import annotations

from hlo_doctor.fixes.base import Plan
from hlo_doctor.fixes.bf16_greedy_sampler.elements import FIX_ID, TITLE
from hlo_doctor.fixes.bf16_greedy_sampler.plan import build_plan
from hlo_doctor.fixes.targets import Target

__all__ = ["FIX_ID", "Bf16GreedySampler"]


class Bf16GreedySampler:
    """The bundled fix ``bf16-greedy-sampler`` (see the package docstring)."""

    fix_id = FIX_ID
    title = TITLE
    variants: tuple[str, ...] = ("full", "upstream")

    def plan(self, target: Target, sources: dict[str, str], variant: str) -> Plan:
        """Analyse the three files of ``target`` and build the patched sources for ``variant``."""
        return build_plan(target, sources, variant)

    def explain_half_fixed(self, plan: Plan, variant: str) -> str:
        """What this half-fixed tree does at run time (which part misses the menu) and what to do."""
        runner, menu = plan.state("runner.eager_widening"), plan.state("precompile.sampling_dtype")
        if runner == "fixed" and menu == "original":
            lead = (
                "half-fixed: the runner's eager float32 widening is gone but the precompile menu is still keyed on "
                "float32, so every decode step misses the precompiled sample() and compiles at run time "
                "(the by-hand attempt on 0.24.0: throughput -26%, batch TTFT x4.4)"
            )
        elif runner == "original" and menu == "fixed":
            lead = (
                "half-fixed: the precompile menu is keyed on the model dtype but the runner still widens to float32 "
                "before sample(), so every decode step misses the precompiled sample()"
            )
        elif variant == "full" and set(plan.pending) == {"sampler.logprobs_gated_output"}:
            lead = (
                "the upstream variant is applied; the full variant also drops the float32 logits output of sample() "
                "when logprobs are off"
            )
        else:
            lead = "half-fixed: some elements of the fix are present and others are not"
        return (
            f"{lead}. Present: {', '.join(sorted(plan.done)) or 'none'}; missing: {', '.join(sorted(plan.pending))}. "
            "Run again with --complete to finish it."
        )
