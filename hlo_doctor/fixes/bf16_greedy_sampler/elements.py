"""The elements of ``bf16-greedy-sampler``: ids, titles, parts, and the recorder the analysis fills.

An element is found in a tree as ``original``, ``fixed`` or ``missing`` (its anchor not found); that is
what tells a clean tree, a fixed one, a half-fixed one and one that does not match apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hlo_doctor.fixes.base import ElementStatus

FIX_ID = "bf16-greedy-sampler"
TITLE = "greedy sampling on model-dtype logits, precompile menu rekeyed"
# The mark that starts every comment the codemod writes.
MARK = "bf16-greedy-sampler"

# Expressions for the model's dtype inside a compilation manager, most specific first. The one used
# is the first that the file itself already uses elsewhere (evidence that it is valid there).
MODEL_DTYPE_EXPRESSIONS = (
    "self.runner.model_config.dtype",
    "self.runner.model_dtype",
    "self.runner.dtype",
    "self.model_config.dtype",
    "self.model_dtype",
    "runner.model_config.dtype",
    "runner.dtype",
)

ELEMENT_TITLES = {
    "runner.eager_widening": (1, "runner: no eager float32 widening before sample()"),
    "runner.post_sample_widening": (1, "runner: no eager float32 widening after sampling, logprobs or not"),
    "sampler.argmax_on_input": (2, "sampler: argmax reads the incoming logits, before the widening"),
    "sampler.logprobs_gated_output": (2, "sampler (full): no float32 logits returned without logprobs"),
    "sampler.logprobs_widening_in_graph": (2, "sampler: the logprobs computation widens its input in-graph"),
    "precompile.sampling_dtype": (3, "precompile: sample() menu keyed on the model dtype"),
    "precompile.logprobs_dtype": (3, "precompile: logprobs menu keyed on what the runner passes"),
}
ORDER = tuple(ELEMENT_TITLES)
# Elements every known release already satisfies (argmax before the widening): they are checked and
# enforced, but being "fixed" does not make a tree half-fixed.
PRECONDITIONS = frozenset({"sampler.argmax_on_input"})
# What this version of the fix adds to the previous one (which left the runner's widening under
# `if logprobs:`, an eager program whenever logprobs are on): a tree carrying exactly the previous
# version is upgraded by applying again, without --complete.
LOGPROBS_ELEMENTS = frozenset(
    {"runner.post_sample_widening", "sampler.logprobs_widening_in_graph", "precompile.logprobs_dtype"}
)


@dataclass(slots=True)
class Analysis:
    """What the codemod found in the three files of a target (mutable while it is being built)."""

    states: dict[str, ElementStatus] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)
    not_affected: str = ""
    unfinishable: str = ""

    def set(self, element: str, state: str, where: str = "", detail: str = "") -> None:
        """Record the state of one element."""
        part, title = ELEMENT_TITLES[element]
        self.states[element] = ElementStatus(element, part, title, state, where, detail)  # type: ignore[arg-type]

    def miss(self, element: str, anchor: str, where: str = "") -> None:
        """Record an anchor that was not found."""
        self.missing.append(f"{where}: {anchor}" if where else anchor)
        if element not in self.states:
            self.set(element, "missing", where, anchor)
