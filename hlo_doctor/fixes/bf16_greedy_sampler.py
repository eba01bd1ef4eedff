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

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import libcst as cst

from hlo_doctor.core.errors import InputError
from hlo_doctor.fixes.cst import (
    Located,
    assigned_name,
    calls_in,
    comment_line,
    dotted,
    find_function,
    is_float32,
    iter_blocks,
    positional_args,
    single_assign,
    widening_of,
)
from hlo_doctor.fixes.results import ElementStatus
from hlo_doctor.fixes.targets import ENGINE, Target

FIX_ID = "bf16-greedy-sampler"
TITLE = "greedy sampling on model-dtype logits, precompile menu rekeyed"

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
    "runner.post_sample_widening": (1, "runner: widening after sampling only when logprobs are on"),
    "sampler.argmax_on_input": (2, "sampler: argmax reads the incoming logits, before the widening"),
    "sampler.logprobs_gated_output": (2, "sampler (full): no float32 logits returned without logprobs"),
    "precompile.sampling_dtype": (3, "precompile: sample() menu keyed on the model dtype"),
}
ORDER = tuple(ELEMENT_TITLES)
# Elements every known release already satisfies (argmax before the widening): they are checked and
# enforced, but being "fixed" does not make a tree half-fixed.
PRECONDITIONS = frozenset({"sampler.argmax_on_input"})

_MARK = "bf16-greedy-sampler"


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


# --------------------------------------------------------------------------- runner


@dataclass(frozen=True, slots=True)
class _RunnerFacts:
    logits_var: str
    meta: str
    with_block: cst.IndentedBlock
    with_index: int
    eager: cst.SimpleStatementLine | None
    post: cst.CSTNode | None
    post_fixed: bool
    unsafe_uses: tuple[str, ...]


def _is_sample_call(call: cst.Call) -> bool:
    return dotted(call.func) == "sample" and len(positional_args(call)) >= 4


def _analyze_runner(module: cst.Module) -> tuple[_RunnerFacts | None, list[str]]:
    func = find_function(module, "_sample_from_logits", method=True)
    if func is None:
        return None, ["method _sample_from_logits"]
    # The non-speculative call: `with self.maybe_forbid_compile: ... = sample(rng, mesh, logits, meta)`.
    for block in iter_blocks(func):
        for index, stmt in enumerate(block.body):
            if not isinstance(stmt, cst.With):
                continue
            if not any(dotted(item.item) == "self.maybe_forbid_compile" for item in stmt.items):
                continue
            sample_calls = [c for c in calls_in(stmt) if _is_sample_call(c)]
            if not sample_calls:
                continue
            args = positional_args(sample_calls[0])
            logits_var, meta = dotted(args[2].value), dotted(args[3].value)
            if logits_var is None or meta is None or "." in logits_var:
                continue
            eager = block.body[index - 1] if index > 0 else None
            eager_stmt = eager if eager is not None and widening_of(eager) == logits_var else None
            post, post_fixed = _find_post_widening(func, stmt, logits_var, meta)
            return (
                _RunnerFacts(
                    logits_var,
                    meta,
                    block,
                    index,
                    eager_stmt,  # type: ignore[arg-type]
                    post,
                    post_fixed,
                    _unsafe_logit_uses(func, meta),
                ),
                [],
            )
    return None, ["`with self.maybe_forbid_compile:` around `sample(rng, mesh, logits, metadata)` in _sample_from_logits"]


def _find_post_widening(
    func: cst.FunctionDef, with_stmt: cst.With, logits_var: str, meta: str
) -> tuple[cst.CSTNode | None, bool]:
    """The widening of the logits after the sampling call, at the method's top level."""
    body = list(func.body.body)
    start = next(
        (i for i, s in enumerate(body) if s is with_stmt or _contains(s, with_stmt)),
        None,
    )
    if start is None:
        return None, False
    for stmt in body[start + 1 :]:
        if widening_of(stmt) == logits_var:
            return stmt, False
        if _is_logprobs_gated_widening(stmt, logits_var, meta):
            return stmt, True
    return None, False


def _is_logprobs_gated_widening(stmt: cst.CSTNode, logits_var: str, meta: str) -> bool:
    if not isinstance(stmt, cst.If) or stmt.orelse is not None or dotted(stmt.test) != f"{meta}.logprobs":
        return False
    inner = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else []
    return len(inner) == 1 and widening_of(inner[0]) == logits_var


def _contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    from hlo_doctor.fixes.cst import contains

    return contains(node, target)


def _unsafe_logit_uses(func: cst.FunctionDef, meta: str) -> tuple[str, ...]:
    """Reads of sample()'s returned logits outside an ``if <meta>.logprobs:`` body.

    The full variant returns None for them when logprobs are off, so every read must be guarded.
    """
    returned: set[str] = set()
    for block in iter_blocks(func):
        for stmt in block.body:
            assign = single_assign(stmt)
            if assign is None or not isinstance(assign.value, cst.Call) or not _is_sample_call(assign.value):
                continue
            target = assign.targets[0].target
            if isinstance(target, cst.Tuple) and len(target.elements) == 2:
                name = dotted(target.elements[1].value)
                if name:
                    returned.add(name)

    class _Uses(cst.CSTVisitor):
        def __init__(self) -> None:
            self.guard_depth = 0
            self.unsafe: list[str] = []
            self.skip_depth = 0

        def visit_If_body(self, node: cst.If) -> None:
            if dotted(node.test) == f"{meta}.logprobs":
                self.guard_depth += 1

        def leave_If_body(self, node: cst.If) -> None:
            if dotted(node.test) == f"{meta}.logprobs":
                self.guard_depth -= 1

        def visit_Assign(self, node: cst.Assign) -> None:
            if isinstance(node.value, cst.Call) and _is_sample_call(node.value):
                self.skip_depth += 1

        def leave_Assign(self, original_node: cst.Assign) -> None:
            if isinstance(original_node.value, cst.Call) and _is_sample_call(original_node.value):
                self.skip_depth -= 1

        def visit_Name(self, node: cst.Name) -> None:
            if node.value in returned and not self.guard_depth and not self.skip_depth:
                self.unsafe.append(node.value)

    # `x = None` initialisations of those names are writes, not reads.
    uses = _Uses()
    for top in func.body.body:
        assign = single_assign(top)
        if assign is not None and isinstance(assign.value, cst.Name) and assign.value.value == "None":
            continue
        top.visit(uses)
    return tuple(sorted(set(uses.unsafe)))


# --------------------------------------------------------------------------- sampler


@dataclass(frozen=True, slots=True)
class _SamplerFacts:
    func: cst.FunctionDef
    logits_param: str
    meta: str
    argmax: cst.SimpleStatementLine
    widening: cst.SimpleStatementLine
    ret: cst.SimpleStatementLine
    ret_logits: str
    gate: cst.If | None


def _is_argmax_of(stmt: cst.CSTNode, logits: str) -> bool:
    assign = single_assign(stmt)
    if assign is None or assigned_name(assign) is None or not isinstance(assign.value, cst.Call):
        return False
    call = assign.value
    args = positional_args(call)
    return dotted(call.func) in ("jnp.argmax", "jax.numpy.argmax") and bool(args) and dotted(args[0].value) == logits


def _mentions_jit(decorator: cst.BaseExpression) -> bool:
    """``@jax.jit``, ``@jax.jit(...)``, ``@functools.partial(jax.jit, ...)`` and the like."""
    names = [decorator] + [c.func for c in calls_in(decorator)] + [a.value for c in calls_in(decorator) for a in c.args]
    return any((dotted(n) or "").split(".")[-1] == "jit" for n in names)


def _widening_gated_on_do_sampling(module: cst.Module) -> str | None:
    """The ``if ...do_sampling:`` test guarding sample()'s widening, when it is guarded (else None)."""
    func = find_function(module, "sample", method=False)
    if func is None or len(func.params.params) < 3:
        return None
    logits = func.params.params[2].name.value

    class _Ifs(cst.CSTVisitor):
        found: str | None = None

        def visit_If(self, node: cst.If) -> None:
            test = cst.Module(body=[]).code_for_node(node.test)
            inner = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
            if "do_sampling" in test and any(widening_of(s) == logits for s in inner):
                self.found = test

    visitor = _Ifs()
    func.body.visit(visitor)
    return visitor.found


def _analyze_sampler(module: cst.Module) -> tuple[_SamplerFacts | None, list[str], bool]:
    """Facts about ``sample()``; the bool says "not affected" (sample never widens)."""
    func = find_function(module, "sample", method=False)
    if func is None:
        return None, ["function sample"], False
    if not any(_mentions_jit(d.decorator) for d in func.decorators):
        return None, ["@jax.jit on sample"], False
    params = [p.name.value for p in func.params.params]
    if len(params) < 4:
        return None, ["sample(rng, mesh, logits, metadata) parameters"], False
    logits = params[2]
    body = list(func.body.body)
    missing: list[str] = []
    argmax = next((s for s in body if _is_argmax_of(s, logits)), None)
    widening = next((s for s in body if widening_of(s) == logits), None)
    has_any_widening = any(
        isinstance(c.func, cst.Attribute) and c.func.attr.value == "astype" and c.args and is_float32(c.args[0].value)
        for c in calls_in(func)
    )
    if widening is None and not has_any_widening:
        return None, [], True
    if argmax is None:
        missing.append(f"`greedy = jnp.argmax({logits}, axis=-1)` in sample()")
    if widening is None:
        missing.append(f"`{logits} = {logits}.astype(jnp.float32)` at the top level of sample()")
    # Greedy branch: `if not <meta>.do_sampling: ... <ret_logits> = <logits>`.
    meta, greedy_ret = None, None
    for stmt in body:
        if isinstance(stmt, cst.If) and isinstance(stmt.test, cst.UnaryOperation):
            inner = dotted(stmt.test.expression)
            if isinstance(stmt.test.operator, cst.Not) and inner and inner.endswith(".do_sampling"):
                meta = inner.rsplit(".", 1)[0]
                for s in stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else []:
                    a = single_assign(s)
                    if a is not None and dotted(a.value) == logits:
                        greedy_ret = assigned_name(a)
    if meta is None or greedy_ret is None:
        missing.append(f"greedy branch `if not <metadata>.do_sampling: ret_logits = {logits}` in sample()")
    ret = body[-1] if body else None
    ret_logits = None
    if (
        isinstance(ret, cst.SimpleStatementLine)
        and isinstance(ret.body[0], cst.Return)
        and isinstance(ret.body[0].value, cst.Tuple)
        and len(ret.body[0].value.elements) == 2
    ):
        ret_logits = dotted(ret.body[0].value.elements[1].value)
    if ret_logits is None:
        missing.append("`return next_tokens, ret_logits` at the end of sample()")
    if missing:
        return None, missing, False
    assert argmax is not None and widening is not None and meta is not None and ret_logits is not None
    gate = None
    before_ret = body[-2] if len(body) >= 2 else None
    if (
        isinstance(before_ret, cst.If)
        and isinstance(before_ret.test, cst.UnaryOperation)
        and isinstance(before_ret.test.operator, cst.Not)
        and dotted(before_ret.test.expression) == f"{meta}.logprobs"
    ):
        gate_body = before_ret.body.body if isinstance(before_ret.body, cst.IndentedBlock) else []
        if len(gate_body) == 1:
            a = single_assign(gate_body[0])
            if a is not None and assigned_name(a) == ret_logits and dotted(a.value) == "None":
                gate = before_ret
    return (
        _SamplerFacts(func, logits, meta, argmax, widening, ret, ret_logits, gate),  # type: ignore[arg-type]
        [],
        False,
    )


# --------------------------------------------------------------------------- precompile


@dataclass(frozen=True, slots=True)
class _PrecompileFacts:
    dtype_arg: cst.Arg
    dtype_stmt: cst.CSTNode
    is_f32: bool
    model_dtype: str
    gather_dtypes: tuple[str, ...]


def _analyze_precompile(module: cst.Module, source: str) -> tuple[_PrecompileFacts | None, list[str]]:
    func = find_function(module, "_precompile_sampling", method=True)
    if func is None:
        return None, ["method _precompile_sampling"]
    logits_var = None
    for call in calls_in(func):
        if not (dotted(call.func) or "").endswith("_run_compilation"):
            continue
        args = positional_args(call)
        for i, arg in enumerate(args):
            if dotted(arg.value) == "sample" and len(args) > i + 3:
                logits_var = dotted(args[i + 3].value)
    if logits_var is None:
        return None, ["`self._run_compilation(name, sample, rng, mesh, logits, metadata, ...)` in _precompile_sampling"]
    dtype_arg, dtype_stmt = None, None
    for block in iter_blocks(func):
        for stmt in block.body:
            assign = single_assign(stmt)
            if assign is None or assigned_name(assign) != logits_var or not isinstance(assign.value, cst.Call):
                continue
            call = assign.value
            if not (dotted(call.func) or "").endswith("_create_dummy_tensor"):
                continue
            keyword = [a for a in call.args if a.keyword is not None and a.keyword.value == "dtype"]
            positional = positional_args(call)
            dtype_arg = keyword[0] if keyword else (positional[1] if len(positional) > 1 else None)
            dtype_stmt = stmt
    if dtype_arg is None or dtype_stmt is None:
        return None, [f"`{logits_var} = self._create_dummy_tensor(shape, dtype, ...)` in _precompile_sampling"]
    current = dotted(dtype_arg.value)
    # The model dtype expression: one the file already uses outside the sampling menu, whose root
    # name is in scope here (``self``, or a local such as ``runner = self.runner``).
    local_names = {
        assigned_name(a)
        for block in iter_blocks(func)
        for stmt in block.body
        if (a := single_assign(stmt)) is not None
    }
    model_dtype = next(
        (
            e
            for e in MODEL_DTYPE_EXPRESSIONS
            if re.search(rf"(?<![\w.]){re.escape(e)}\b", source) is not None
            and len(re.findall(rf"(?<![\w.]){re.escape(e)}\b", source)) > (1 if current == e else 0)
            and (e.startswith("self.") or e.split(".")[0] in local_names)
        ),
        None,
    )
    if model_dtype is None:
        return None, ["an expression for the model dtype (e.g. self.runner.model_config.dtype) in the compilation manager"]
    if not is_float32(dtype_arg.value) and current != model_dtype:
        return None, [f"dummy logits dtype float32 or {model_dtype} in _precompile_sampling (found {current})"]
    gather = find_function(module, "_precompile_gather_logprobs", method=True)
    gather_dtypes: list[str] = []
    if gather is not None:
        for call in calls_in(gather):
            name = dotted(call.func) or ""
            if name.endswith("_create_dummy_tensor") or name.endswith("ShapeDtypeStruct"):
                pos = positional_args(call)
                if len(pos) > 1 and isinstance(pos[0].value, cst.Tuple) and len(pos[0].value.elements) == 2:
                    gather_dtypes.append(dotted(pos[1].value) or "?")
    return _PrecompileFacts(dtype_arg, dtype_stmt, is_float32(dtype_arg.value), model_dtype, tuple(gather_dtypes)), []


# --------------------------------------------------------------------------- the fix


@dataclass(frozen=True, slots=True)
class Plan:
    """The analysis of a tree plus the new sources that applying the pending elements would write."""

    elements: tuple[ElementStatus, ...]
    missing: tuple[str, ...]
    notes: tuple[str, ...]
    unsafe: tuple[str, ...]
    not_affected: str
    unfinishable: str
    new_sources: tuple[tuple[str, str], ...]
    relevant: tuple[str, ...]

    @property
    def pending(self) -> tuple[str, ...]:
        """Relevant elements still in their original state."""
        states = {e.element: e.state for e in self.elements}
        return tuple(e for e in self.relevant if states.get(e) == "original")

    @property
    def done(self) -> tuple[str, ...]:
        """Relevant elements already fixed."""
        states = {e.element: e.state for e in self.elements}
        return tuple(e for e in self.relevant if states.get(e) == "fixed" and e not in PRECONDITIONS)


class Bf16GreedySampler:
    """The bundled fix ``bf16-greedy-sampler`` (see the module docstring)."""

    fix_id = FIX_ID
    title = TITLE
    variants: tuple[str, ...] = ("full", "upstream")

    def plan(self, target: Target, sources: dict[str, str], variant: str) -> Plan:
        """Analyse the three files of ``target`` and build the patched sources for ``variant``."""
        analysis = Analysis()
        located: dict[str, Located] = {}
        for role, text in sources.items():
            try:
                located[role] = Located.parse(text)
            except cst.ParserSyntaxError as exc:
                raise InputError(
                    f"{target.file(role)} does not parse as Python (line {exc.raw_line}: {exc.message})",
                    "fix the syntax error first; nothing was changed",
                ) from exc
        rel = {role: target.rel(target.file(role)) for role in sources}

        runner, runner_missing = _analyze_runner(located["runner"].module)
        for anchor in runner_missing:
            analysis.miss("runner.eager_widening", anchor, rel["runner"])
        sampler, sampler_missing, sampler_unaffected = _analyze_sampler(located["sampler"].module)
        for anchor in sampler_missing:
            analysis.miss("sampler.argmax_on_input", anchor, rel["sampler"])
        precompile, precompile_missing = _analyze_precompile(located["precompile"].module, sources["precompile"])
        for anchor in precompile_missing:
            analysis.miss("precompile.sampling_dtype", anchor, rel["precompile"])

        gate_test = None if sampler is not None else _widening_gated_on_do_sampling(located["sampler"].module)
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

        if runner is not None:
            runner_func = find_function(located["runner"].module, "_sample_from_logits", method=True)
            assert runner_func is not None

            def line(node: cst.CSTNode) -> int:
                return located["runner"].line_in(runner_func, node)

            if runner.eager is not None:
                analysis.set("runner.eager_widening", "original", f"{rel['runner']}:{line(runner.eager)}",
                             f"`{runner.logits_var} = {runner.logits_var}.astype(jnp.float32)` before sample()")
            else:
                with_stmt = runner.with_block.body[runner.with_index]
                analysis.set("runner.eager_widening", "fixed", f"{rel['runner']}:{line(with_stmt)}",
                             "sample() receives the logits unwidened")
            if runner.post is None:
                analysis.miss("runner.post_sample_widening",
                              f"`{runner.logits_var} = {runner.logits_var}.astype(jnp.float32)` after sampling in _sample_from_logits",
                              rel["runner"])
            else:
                analysis.set("runner.post_sample_widening", "fixed" if runner.post_fixed else "original",
                             f"{rel['runner']}:{line(runner.post)}",
                             "under `if logprobs`" if runner.post_fixed else "unconditional")
            if variant == "full" and runner.unsafe_uses:
                analysis.unsafe.extend(
                    f"{rel['runner']}: `{name}` (logits returned by sample()) is read outside `if {runner.meta}.logprobs:`"
                    for name in runner.unsafe_uses
                )
        if sampler is not None:
            sampler_func = sampler.func

            def line(node: cst.CSTNode) -> int:  # noqa: F811 - one helper per file
                return located["sampler"].line_in(sampler_func, node)

            body = list(sampler.func.body.body)
            in_order = body.index(sampler.argmax) < body.index(sampler.widening)
            analysis.set("sampler.argmax_on_input", "fixed" if in_order else "original",
                         f"{rel['sampler']}:{line(sampler.argmax)}",
                         "argmax precedes the widening" if in_order else "argmax reads the widened logits")
            analysis.set("sampler.logprobs_gated_output", "fixed" if sampler.gate is not None else "original",
                         f"{rel['sampler']}:{line(sampler.ret)}",
                         "returns no logits without logprobs" if sampler.gate is not None
                         else "returns float32 logits whatever logprobs")
        if precompile is not None:
            precompile_func = find_function(located["precompile"].module, "_precompile_sampling", method=True)
            assert precompile_func is not None

            def line(node: cst.CSTNode) -> int:  # noqa: F811 - one helper per file
                return located["precompile"].line_in(precompile_func, node)

            analysis.set("precompile.sampling_dtype", "original" if precompile.is_f32 else "fixed",
                         f"{rel['precompile']}:{line(precompile.dtype_stmt)}",
                         f"dummy logits {dotted(precompile.dtype_arg.value)}")
            if precompile.gather_dtypes:
                kinds = sorted(set(precompile.gather_dtypes))
                analysis.notes.append(
                    f"_precompile_gather_logprobs kept at {', '.join(kinds)}: its consumers still receive float32 "
                    "(sample()'s own float32 output, or the runner's widening that now runs under `if logprobs`)"
                )

        relevant = [e for e in ORDER if variant == "full" or e != "sampler.logprobs_gated_output"]
        new_sources: dict[str, str] = {}
        pending = [e for e in relevant if analysis.states.get(e) is not None and analysis.states[e].state == "original"]
        if not analysis.missing and pending:
            new_sources = self._rewrite(sources, located, set(pending), target)
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
        )

    # ----------------------------------------------------------------------- rewriting

    def _rewrite(self, sources: dict[str, str], located: dict[str, Located], pending: set[str], target: Target) -> dict[str, str]:
        out: dict[str, str] = {}
        runner_module = located["runner"].module
        if "runner.post_sample_widening" in pending:
            runner_module = _edit(runner_module, _gate_post_widening)
        if "runner.eager_widening" in pending:
            runner_module = _edit(runner_module, _drop_eager_widening)
        if runner_module is not located["runner"].module:
            out["runner"] = runner_module.code
        sampler_module = located["sampler"].module
        if "sampler.argmax_on_input" in pending:
            sampler_module = _edit(sampler_module, _move_argmax_first)
        if "sampler.logprobs_gated_output" in pending:
            sampler_module = _edit(sampler_module, _gate_returned_logits)
        if sampler_module is not located["sampler"].module:
            out["sampler"] = sampler_module.code
        if "precompile.sampling_dtype" in pending:
            source = sources["precompile"]
            out["precompile"] = _edit(located["precompile"].module, lambda m: _rekey_menu(m, source)).code
        return out


def _edit(module: cst.Module, edit: Callable[[cst.Module], cst.Module]) -> cst.Module:
    return edit(module)


def _replace(module: cst.Module, func_name: str, old: cst.CSTNode, new: cst.CSTNode) -> cst.Module:
    """``module`` with ``old`` (by identity, inside function ``func_name``) replaced by ``new``.

    Only that function is walked (a whole-module ``deep_replace`` walks every node of a 3,000-line
    file per edit); the function is then swapped into its class or the module.
    """
    body: list[cst.BaseStatement] = []
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and any(
            isinstance(m, cst.FunctionDef) and m.name.value == func_name for m in stmt.body.body
        ):
            members = [
                cast(cst.FunctionDef, m.deep_replace(old, new))  # type: ignore[arg-type]
                if isinstance(m, cst.FunctionDef) and m.name.value == func_name
                else m
                for m in stmt.body.body
            ]
            stmt = stmt.with_changes(body=stmt.body.with_changes(body=members))
        elif isinstance(stmt, cst.FunctionDef) and stmt.name.value == func_name:
            stmt = cast(cst.FunctionDef, stmt.deep_replace(old, new))  # type: ignore[arg-type]
        body.append(stmt)
    return module.with_changes(body=body)


def _drop_eager_widening(module: cst.Module) -> cst.Module:
    facts, _ = _analyze_runner(module)
    assert facts is not None and facts.eager is not None
    body = list(facts.with_block.body)
    with_stmt = body[facts.with_index]
    assert isinstance(with_stmt, cst.With)
    # Comments above the dropped line move onto the `with`, so none is lost.
    new_with = with_stmt.with_changes(
        leading_lines=[
            *facts.eager.leading_lines,
            *with_stmt.leading_lines,
            comment_line(f"{_MARK}: sample() takes the logits in the model dtype; it widens them in-graph."),
        ]
    )
    new_body = body[: facts.with_index - 1] + [new_with] + body[facts.with_index + 1 :]
    return _replace(module, "_sample_from_logits", facts.with_block, facts.with_block.with_changes(body=new_body))


def _gate_post_widening(module: cst.Module) -> cst.Module:
    facts, _ = _analyze_runner(module)
    assert facts is not None and facts.post is not None and not facts.post_fixed
    stmt = facts.post
    assert isinstance(stmt, cst.SimpleStatementLine)
    gated = cst.If(
        test=cst.parse_expression(f"{facts.meta}.logprobs"),
        body=cst.IndentedBlock(body=[stmt.with_changes(leading_lines=[])]),
        leading_lines=[
            *stmt.leading_lines,
            comment_line(f"{_MARK}: only the logprobs consumers need float32 logits."),
        ],
    )
    return _replace(module, "_sample_from_logits", stmt, gated)


def _move_argmax_first(module: cst.Module) -> cst.Module:
    facts, _, _ = _analyze_sampler(module)
    assert facts is not None
    body = [s for s in facts.func.body.body if s is not facts.argmax]
    at = body.index(facts.widening)
    body.insert(at, facts.argmax)
    return _replace(module, "sample", facts.func.body, facts.func.body.with_changes(body=body))


def _gate_returned_logits(module: cst.Module) -> cst.Module:
    facts, _, _ = _analyze_sampler(module)
    assert facts is not None and facts.gate is None
    gate = cst.If(
        test=cst.parse_expression(f"not {facts.meta}.logprobs"),
        body=cst.IndentedBlock(body=[cst.parse_statement(f"{facts.ret_logits} = None")]),
        leading_lines=[
            comment_line(f"{_MARK}: logprobs is static, so without logprobs this program returns no logits"),
            comment_line("and XLA materializes no float32 copy of them."),
        ],
    )
    body = list(facts.func.body.body)
    at = body.index(facts.ret)
    body.insert(at, gate)
    return _replace(module, "sample", facts.func.body, facts.func.body.with_changes(body=body))


def _rekey_menu(module: cst.Module, source: str) -> cst.Module:
    facts, _ = _analyze_precompile(module, source)
    assert facts is not None and facts.is_f32
    stmt = facts.dtype_stmt
    assert isinstance(stmt, cst.SimpleStatementLine)
    new_arg = facts.dtype_arg.with_changes(value=cst.parse_expression(facts.model_dtype))
    new_stmt = stmt.deep_replace(facts.dtype_arg, new_arg)
    assert isinstance(new_stmt, cst.SimpleStatementLine)
    new_stmt = new_stmt.with_changes(
        leading_lines=[
            *stmt.leading_lines,
            comment_line(f"{_MARK}: the menu is keyed on the logits dtype; sample() now receives the model dtype."),
        ]
    )
    return _replace(module, "_precompile_sampling", stmt, new_stmt)
