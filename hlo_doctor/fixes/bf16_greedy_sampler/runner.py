"""What ``bf16-greedy-sampler`` looks for in the runner (``_sample_from_logits``).

The non-speculative sampling call sits in ``with self.maybe_forbid_compile:``; right before it the
eager ``logits = logits.astype(float32)`` (its own program: a standalone convert), and after it the
widening that feeds the logprobs consumers.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from hlo_doctor.fixes.cst import (
    calls_in,
    contains,
    dotted,
    find_function,
    is_call_to,
    iter_blocks,
    positional_args,
    single_assign,
    widening_of,
)


@dataclass(frozen=True, slots=True)
class RunnerFacts:
    """The anchors found in ``_sample_from_logits`` (nodes of the parsed module)."""

    logits_var: str
    meta: str
    with_block: cst.IndentedBlock
    with_index: int
    eager: cst.SimpleStatementLine | None
    # The widening after sampling: unconditional (the releases), or under `if <meta>.logprobs:` (an
    # earlier version of this fix, which still runs it eagerly whenever logprobs are on); None: gone.
    post: cst.CSTNode | None
    post_gated: bool
    unsafe_uses: tuple[str, ...]
    # `compute_and_gather_logprobs(...)` after sampling, and the runner's choice between sample()'s
    # processed logits and its own: `<processed> if <processed_test> else <logits>`.
    consumer: cst.Call | None
    processed_test: cst.BaseExpression | None


CONSUMER = "compute_and_gather_logprobs"


def _returned_logits_name(with_stmt: cst.With) -> str | None:
    """``processed_logits`` in ``next_tokens, processed_logits = sample(...)`` inside ``with_stmt``."""
    for block in iter_blocks(with_stmt):
        for stmt in block.body:
            assign = single_assign(stmt)
            if assign is None or not is_sample_call(assign.value):
                continue
            target = assign.targets[0].target
            if isinstance(target, cst.Tuple) and len(target.elements) == 2:
                return dotted(target.elements[1].value)
    return None


def _processed_test(func: cst.FunctionDef, processed: str, logits_var: str) -> cst.BaseExpression | None:
    """``T`` in ``<processed> if T else <logits>``: when the runner feeds logprobs sample()'s output."""
    for node in m.findall(func, m.IfExp(body=m.Name(processed), orelse=m.Name(logits_var))):
        return cst.ensure_type(node, cst.IfExp).test
    return None


def is_sample_call(node: cst.CSTNode) -> bool:
    """``sample(rng, mesh, logits, metadata, ...)``."""
    return is_call_to(node, "sample", min_positional=4)


def analyze_runner(module: cst.Module) -> tuple[RunnerFacts | None, list[str]]:
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
            sample_calls = [c for c in calls_in(stmt) if is_sample_call(c)]
            if not sample_calls:
                continue
            args = positional_args(sample_calls[0])
            logits_var, meta = dotted(args[2].value), dotted(args[3].value)
            if logits_var is None or meta is None or "." in logits_var:
                continue
            eager = block.body[index - 1] if index > 0 else None
            eager_stmt = eager if eager is not None and widening_of(eager) == logits_var else None
            post, post_gated = _find_post_widening(func, stmt, logits_var, meta)
            processed = _returned_logits_name(stmt)
            return (
                RunnerFacts(
                    logits_var,
                    meta,
                    block,
                    index,
                    eager_stmt,  # type: ignore[arg-type]
                    post,
                    post_gated,
                    _unsafe_logit_uses(func, meta),
                    next((c for c in calls_in(func) if is_call_to(c, CONSUMER, min_positional=2)), None),
                    _processed_test(func, processed, logits_var) if processed else None,
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
        (i for i, s in enumerate(body) if s is with_stmt or contains(s, with_stmt)),
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


def _unsafe_logit_uses(func: cst.FunctionDef, meta: str) -> tuple[str, ...]:
    """Reads of sample()'s returned logits outside an ``if <meta>.logprobs:`` body.

    The full variant returns None for them when logprobs are off, so every read must be guarded.
    """
    returned: set[str] = set()
    for block in iter_blocks(func):
        for stmt in block.body:
            assign = single_assign(stmt)
            if assign is None or not isinstance(assign.value, cst.Call) or not is_sample_call(assign.value):
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
            if isinstance(node.value, cst.Call) and is_sample_call(node.value):
                self.skip_depth += 1

        def leave_Assign(self, original_node: cst.Assign) -> None:
            if isinstance(original_node.value, cst.Call) and is_sample_call(original_node.value):
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
