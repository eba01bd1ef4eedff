"""The ``bf16-greedy-sampler`` fix: greedy sampling on the model-dtype logits, with the precompile
menus rekeyed in the same change, and no eager float32 widening left in any step, logprobs or not.

Three parts, applied together or not at all:

1. runner (``_sample_from_logits``): the eager ``logits = logits.astype(float32)`` right before the
   ``sample(...)`` call of the non-speculative path is dropped (it was its own program, a standalone
   convert), and so is the widening after sampling (with logprobs on, another such program);
2. sampler: in ``sample()`` the argmax reads the incoming logits (model dtype) and the single widening
   inside ``sample()`` is what the greedy branch returns, so the output is a fresh convert and no
   longer an entry parameter: XLA has no aliasing copy to insert. With the ``full`` variant
   ``sample()`` also returns no logits when logprobs are off (``logprobs`` is a static field, so every
   menu entry stays one program). The jitted ``compute_and_gather_logprobs`` widens its own input, so
   the logprobs are computed from the same float32 values, inside that program;
3. precompile: the dummy logits of ``_precompile_sampling`` take the model dtype, and the
   non-speculative entry of ``_precompile_gather_logprobs`` takes what the runner now passes there
   (float32 for processed logprobs, sample()'s output; the model dtype otherwise).

Each part is made of elements that are found in a tree as ``original``, ``fixed`` or ``missing``;
that is what tells a clean tree, a fixed one, a half-fixed one and one that does not match apart. A
tree carrying exactly the previous version of the fix (the runner's widening kept under
``if logprobs:``) is upgraded by applying again.
"""

from __future__ import annotations

from hlo_doctor.fixes.base import Plan
from hlo_doctor.fixes.bf16_greedy_sampler.elements import FIX_ID, LOGPROBS_ELEMENTS, TITLE
from hlo_doctor.fixes.targets import Target

__all__ = ["FIX_ID", "Bf16GreedySampler"]


class Bf16GreedySampler:
    """The bundled fix ``bf16-greedy-sampler`` (see the package docstring)."""

    fix_id = FIX_ID
    title = TITLE
    variants: tuple[str, ...] = ("full", "upstream")

    def plan(self, target: Target, sources: dict[str, str], variant: str, *, patch: bool = True) -> Plan:
        """Analyse the three files of ``target`` and build the patched sources for ``variant``
        (``patch=False``: the analysis only)."""
        # libcst is imported by the plan, when a fix is computed: not by every command that lists fixes.
        from hlo_doctor.fixes.bf16_greedy_sampler.plan import build_plan

        return build_plan(target, sources, variant, patch=patch)

    def explain_half_fixed(self, plan: Plan, variant: str) -> str:
        """What this half-fixed tree does at run time (which part misses the menu) and what to do."""
        runner, menu = plan.state("runner.eager_widening"), plan.state("precompile.sampling_dtype")
        post, consumer = plan.state("runner.post_sample_widening"), plan.state("sampler.logprobs_widening_in_graph")
        gather, pending = plan.state("precompile.logprobs_dtype"), set(plan.pending)
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
        elif post == "fixed" and consumer == "original":
            lead = (
                "half-fixed: the runner no longer widens the logits after sampling but compute_and_gather_logprobs "
                "does not widen them either, so with logprobs on they are computed in the model dtype (not the "
                "float32 logprobs of the original)"
            )
        elif consumer == "fixed" and post == "fixed" and gather == "original":
            lead = (
                "half-fixed: the logprobs computation receives the model dtype but its precompiled menu is still "
                "keyed on float32, so every step with logprobs compiles it at run time"
            )
        elif variant == "full" and "sampler.logprobs_gated_output" in pending and (
            pending <= {"sampler.logprobs_gated_output"} | LOGPROBS_ELEMENTS
        ):
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
