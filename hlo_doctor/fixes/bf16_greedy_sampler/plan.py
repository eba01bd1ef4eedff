"""The plan of ``bf16-greedy-sampler``: parse, find, record each element's state, judge, rewrite.

:func:`build_plan` is a chain of named steps over one :class:`~.elements.Analysis`; the order of the
steps is the order the anchors missing are reported in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

import libcst as cst
import libcst.matchers as m

from hlo_doctor.core.errors import InputError
from hlo_doctor.fixes.base import Plan
from hlo_doctor.fixes.bf16_greedy_sampler.codemod import rewrite
from hlo_doctor.fixes.bf16_greedy_sampler.elements import LOGPROBS_ELEMENTS, ORDER, PRECONDITIONS, Analysis
from hlo_doctor.fixes.bf16_greedy_sampler.precompile import (
    GatherMenuFacts,
    PrecompileFacts,
    analyze_gather_menu,
    analyze_precompile,
)
from hlo_doctor.fixes.bf16_greedy_sampler.runner import RunnerFacts, analyze_runner
from hlo_doctor.fixes.bf16_greedy_sampler.sampler import (
    ConsumerFacts,
    SamplerFacts,
    analyze_consumer,
    analyze_sampler,
    widening_gated_on_do_sampling,
)
from hlo_doctor.fixes.cst import Located, dotted, find_function
from hlo_doctor.fixes.targets import ENGINE, Target


@dataclass(frozen=True, slots=True)
class Parsed:
    """The three files of a target, parsed, with their paths as shown (relative to the root)."""

    located: dict[str, Located]
    rel: dict[str, str]

    def where(self, role: str, func: cst.FunctionDef, node: cst.CSTNode) -> str:
        """``file:line`` of ``node`` (under ``func``) in the file playing ``role``."""
        return f"{self.rel[role]}:{self.located[role].line_in(func, node)}"


def parse_sources(target: Target, sources: dict[str, str]) -> Parsed:
    """Parse every file; a syntax error is an :class:`InputError` naming the file and line."""
    located: dict[str, Located] = {}
    for role, text in sources.items():
        try:
            located[role] = Located.parse(text)
        except cst.ParserSyntaxError as exc:
            raise InputError(
                f"{target.file(role)} does not parse as Python (line {exc.raw_line}: {exc.message})",
                "fix the syntax error first; nothing was changed",
            ) from exc
    return Parsed(located, {role: target.rel(target.file(role)) for role in sources})


def judge_shape(analysis: Analysis, parsed: Parsed, runner: RunnerFacts | None, sampler: SamplerFacts | None,
                sampler_unaffected: bool) -> None:
    """Shapes no element state captures: a by-hand edit the fix cannot finish, a release not affected."""
    gate_test = None if sampler is not None else widening_gated_on_do_sampling(parsed.located["sampler"].module)
    if gate_test is not None:
        analysis.unfinishable = (
            f"half-fixed by hand: sample()'s float32 widening is made conditional (`if {gate_test}:`) "
            "instead of being the greedy output, so the greedy branch returns its input (the copy stays) "
            "and the output dtype now depends on do_sampling (the by-hand attempt on 0.23.0: throughput "
            "-14%, batch TTFT x5). --complete cannot finish this shape: put the widening back right "
            "after the argmax (or revert that edit), then apply again"
        )
    if sampler_unaffected and runner is not None and runner.eager is None:
        analysis.not_affected = (
            "sample() never widens the logits and the runner passes them in the model dtype: there is "
            "no standalone convert, no float32 argmax and no aliasing copy to remove"
        )


def record_runner(analysis: Analysis, parsed: Parsed, runner: RunnerFacts, variant: str) -> None:
    """Part 1: the eager widening before sample(), the widening after it, unguarded logit reads."""
    func = find_function(parsed.located["runner"].module, "_sample_from_logits", method=True)
    assert func is not None
    rel, var = parsed.rel["runner"], runner.logits_var
    if runner.eager is not None:
        analysis.set("runner.eager_widening", "original", parsed.where("runner", func, runner.eager),
                     f"`{var} = {var}.astype(jnp.float32)` before sample()")
    else:
        with_stmt = runner.with_block.body[runner.with_index]
        analysis.set("runner.eager_widening", "fixed", parsed.where("runner", func, with_stmt),
                     "sample() receives the logits unwidened")
    if runner.post is not None:
        analysis.set("runner.post_sample_widening", "original", parsed.where("runner", func, runner.post),
                     "under `if logprobs`: an eager program whenever logprobs are on" if runner.post_gated
                     else "unconditional")
    elif runner.consumer is not None:
        analysis.set("runner.post_sample_widening", "fixed", parsed.where("runner", func, runner.consumer),
                     "the logprobs computation receives the logits unwidened")
    else:
        analysis.miss("runner.post_sample_widening",
                      f"`{var} = {var}.astype(jnp.float32)` after sampling in _sample_from_logits", rel)
    if variant == "full" and runner.unsafe_uses:
        analysis.unsafe.extend(
            f"{rel}: `{name}` (logits returned by sample()) is read outside `if {runner.meta}.logprobs:`"
            for name in runner.unsafe_uses
        )


def record_sampler(analysis: Analysis, parsed: Parsed, sampler: SamplerFacts) -> None:
    """Part 2: the argmax before the widening; the full variant's gate on the returned logits."""
    body = list(sampler.func.body.body)
    in_order = body.index(sampler.argmax) < body.index(sampler.widening)
    analysis.set("sampler.argmax_on_input", "fixed" if in_order else "original",
                 parsed.where("sampler", sampler.func, sampler.argmax),
                 "argmax precedes the widening" if in_order else "argmax reads the widened logits")
    analysis.set("sampler.logprobs_gated_output", "fixed" if sampler.gate is not None else "original",
                 parsed.where("sampler", sampler.func, sampler.ret),
                 "returns no logits without logprobs" if sampler.gate is not None
                 else "returns float32 logits whatever logprobs")


def record_precompile(analysis: Analysis, parsed: Parsed, precompile: PrecompileFacts) -> None:
    """Part 3: the dtype the sample() menu is keyed on; what the logprobs menu keeps."""
    func = find_function(parsed.located["precompile"].module, "_precompile_sampling", method=True)
    assert func is not None
    analysis.set("precompile.sampling_dtype", "original" if precompile.is_f32 else "fixed",
                 parsed.where("precompile", func, precompile.dtype_stmt),
                 f"dummy logits {dotted(precompile.dtype_arg.value)}")
    if len(precompile.gather_dtypes) > 1:
        analysis.notes.append(
            "the speculative-decoding entries of _precompile_gather_logprobs keep their dtype: that path passes "
            "the logprobs computation what it passed before"
        )


def record_consumer(analysis: Analysis, parsed: Parsed, consumer: ConsumerFacts) -> None:
    """Part 2: the jitted logprobs computation widens its own input (a no-op for float32 input)."""
    where = parsed.where("sampler", consumer.func, consumer.widening or consumer.func)
    if consumer.widening is not None:
        analysis.set("sampler.logprobs_widening_in_graph", "fixed", where, "widens its input in-graph")
    else:
        analysis.set("sampler.logprobs_widening_in_graph", "original", where, "expects float32 from the runner")


def record_gather_menu(analysis: Analysis, parsed: Parsed, menu: GatherMenuFacts, runner: RunnerFacts | None,
                       source: str, context: dict[str, str]) -> None:
    """Part 3: the dtype the logprobs menu is keyed on (and, to rekey it, the runner's mode test)."""
    analysis.set("precompile.logprobs_dtype", menu.state, parsed.where("precompile", menu.func, menu.dtype_stmt),
                 "float32 only for processed logprobs, else the model dtype" if menu.state == "fixed"
                 else "dummy logits float32")
    if menu.state != "original":
        return
    test = runner.processed_test if runner is not None else None
    if test is None:
        analysis.miss("precompile.logprobs_dtype", "`processed_logits if <processed mode> else logits` (the "
                      "logprobs input) in _sample_from_logits", parsed.rel["runner"])
        return
    code, unknown = for_compilation_manager(test, source)
    if unknown:
        analysis.miss("precompile.logprobs_dtype", f"`{', '.join(unknown)}` (used by the runner's test `{code}`) "
                      "in the compilation manager", parsed.rel["precompile"])
        return
    context["processed_test"] = code


class _FreeNames(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def for_compilation_manager(test: cst.BaseExpression, source: str) -> tuple[str, list[str]]:
    """The runner's ``test`` as the compilation manager spells it (``self.`` -> ``self.runner.``), and
    the names it uses that the compilation manager's source never mentions."""
    moved = cast(cst.BaseExpression, m.replace(test, m.Name("self"), cst.parse_expression("self.runner")))
    code = cst.Module(body=[]).code_for_node(moved)
    # A test written over several lines (inside the runner's parentheses) is put on one line; when a
    # string in it holds runs of whitespace, parentheses keep it valid as written instead.
    strings = [cst.ensure_type(n, cst.SimpleString).value for n in m.findall(moved, m.SimpleString())]
    if any(re.search(r"\s\s|\n", v) for v in strings):
        code = f"({code})" if "\n" in code else code
    else:
        code = " ".join(code.split())
    free = _FreeNames()
    moved.visit(free)
    unknown = sorted(n for n in free.names - {"self", "True", "False", "None"}
                     if re.search(rf"\b{re.escape(n)}\b", source) is None)
    return code, unknown


def judge_upgrade(analysis: Analysis, runner: RunnerFacts | None, relevant: list[str]) -> str:
    """Why a tree carrying exactly the previous version of this fix may be upgraded without --complete."""
    states = {e: analysis.states[e].state for e in relevant if e in analysis.states}
    pending = {e for e, state in states.items() if state == "original"}
    done = {e for e, state in states.items() if state == "fixed" and e not in PRECONDITIONS}
    if not done or not pending or not pending <= LOGPROBS_ELEMENTS or runner is None or not runner.post_gated:
        return ""
    return ("upgraded a tree carrying an earlier version of this fix, which still widened the logits eagerly "
            "in the runner whenever logprobs were on")


def build_plan(target: Target, sources: dict[str, str], variant: str, *, patch: bool = True) -> Plan:
    """Analyse the three files of ``target`` and build the patched sources for ``variant``.

    ``patch=False`` leaves ``new_sources`` empty: whether the fix applies is decided by the analysis
    alone, and the codemod is half of the plan's time.
    """
    analysis = Analysis()
    parsed = parse_sources(target, sources)
    modules = {role: located.module for role, located in parsed.located.items()}

    runner, runner_missing = analyze_runner(modules["runner"])
    for anchor in runner_missing:
        analysis.miss("runner.eager_widening", anchor, parsed.rel["runner"])
    sampler, sampler_missing, sampler_unaffected = analyze_sampler(modules["sampler"])
    for anchor in sampler_missing:
        analysis.miss("sampler.argmax_on_input", anchor, parsed.rel["sampler"])
    precompile, precompile_missing = analyze_precompile(modules["precompile"], sources["precompile"])
    for anchor in precompile_missing:
        analysis.miss("precompile.sampling_dtype", anchor, parsed.rel["precompile"])

    judge_shape(analysis, parsed, runner, sampler, sampler_unaffected)
    if runner is not None:
        record_runner(analysis, parsed, runner, variant)
    if sampler is not None:
        record_sampler(analysis, parsed, sampler)
    if precompile is not None:
        record_precompile(analysis, parsed, precompile)
    context: dict[str, str] = {"float32": "jnp.float32"}
    consumer, consumer_missing = analyze_consumer(modules["sampler"])
    for anchor in consumer_missing:
        analysis.miss("sampler.logprobs_widening_in_graph", anchor, parsed.rel["sampler"])
    if consumer is not None:
        record_consumer(analysis, parsed, consumer)
    menu, menu_missing = analyze_gather_menu(modules["precompile"], sources["precompile"])
    for anchor in menu_missing:
        analysis.miss("precompile.logprobs_dtype", anchor, parsed.rel["precompile"])
    if menu is not None:
        record_gather_menu(analysis, parsed, menu, runner, sources["precompile"], context)

    relevant = [e for e in ORDER if variant == "full" or e != "sampler.logprobs_gated_output"]
    pending = {e for e in relevant if e in analysis.states and analysis.states[e].state == "original"}
    upgrade = judge_upgrade(analysis, runner, relevant)
    new_sources = rewrite(sources, modules, pending, context) if patch and not analysis.missing and pending else {}
    if target.project == ENGINE:
        analysis.notes.append("target is the hlo-doctor reference engine: same codemod, same anchors")
    return Plan(
        elements=tuple(analysis.states[e] for e in ORDER if e in analysis.states),
        missing=tuple(analysis.missing),
        notes=tuple(analysis.notes),
        unsafe=tuple(analysis.unsafe),
        not_affected=analysis.not_affected,
        unfinishable=analysis.unfinishable,
        new_sources=tuple(sorted(new_sources.items())),
        relevant=tuple(relevant),
        preconditions=PRECONDITIONS,
        upgrade=upgrade,
    )
