"""What ``bf16-greedy-sampler`` looks for in the sampler (the jitted ``sample()``).

The argmax of the greedy path, the single top-level widening to float32, the greedy branch
(``if not <metadata>.do_sampling: ret_logits = logits``), the final ``return next_tokens, ret_logits``
and, once the full variant is applied, the ``if not <metadata>.logprobs: ret_logits = None`` gate.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from hlo_doctor.fixes.cst import (
    assigned_name,
    calls_in,
    dotted,
    find_function,
    is_call_to,
    is_float32,
    positional_args,
    single_assign,
    widening_of,
)

ARGMAX = ("jnp.argmax", "jax.numpy.argmax")


@dataclass(frozen=True, slots=True)
class SamplerFacts:
    """The anchors found in ``sample()`` (nodes of the parsed module)."""

    func: cst.FunctionDef
    logits_param: str
    meta: str
    argmax: cst.SimpleStatementLine
    widening: cst.SimpleStatementLine
    ret: cst.SimpleStatementLine
    ret_logits: str
    gate: cst.If | None


def _is_argmax_of(stmt: cst.CSTNode, logits: str) -> bool:
    """``x = jnp.argmax(<logits>, ...)``."""
    assign = single_assign(stmt)
    if assign is None or assigned_name(assign) is None or not is_call_to(assign.value, ARGMAX, min_positional=1):
        return False
    return dotted(positional_args(cst.ensure_type(assign.value, cst.Call))[0].value) == logits


def _mentions_jit(decorator: cst.BaseExpression) -> bool:
    """``@jax.jit``, ``@jax.jit(...)``, ``@functools.partial(jax.jit, ...)`` and the like."""
    names = [decorator] + [c.func for c in calls_in(decorator)] + [a.value for c in calls_in(decorator) for a in c.args]
    return any((dotted(n) or "").split(".")[-1] == "jit" for n in names)


def widening_gated_on_do_sampling(module: cst.Module) -> str | None:
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


def analyze_sampler(module: cst.Module) -> tuple[SamplerFacts | None, list[str], bool]:
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
        SamplerFacts(func, logits, meta, argmax, widening, ret, ret_logits, gate),  # type: ignore[arg-type]
        [],
        False,
    )


@dataclass(frozen=True, slots=True)
class ConsumerFacts:
    """The jitted logprobs consumer ``compute_and_gather_logprobs(logits, ...)`` of the sampler file."""

    func: cst.FunctionDef
    logits_param: str
    # `logits = logits.astype(jnp.float32)` at the top of its body (the fix puts it there), or None.
    widening: cst.SimpleStatementLine | None


def analyze_consumer(module: cst.Module) -> tuple[ConsumerFacts | None, list[str]]:
    """Facts about ``compute_and_gather_logprobs``; the anchors not found."""
    func = find_function(module, "compute_and_gather_logprobs", method=False)
    if func is None or not func.params.params:
        return None, ["function compute_and_gather_logprobs(logits, ...)"]
    if not any(_mentions_jit(d.decorator) for d in func.decorators):
        return None, ["@jax.jit on compute_and_gather_logprobs"]
    logits = func.params.params[0].name.value
    body = [s for s in func.body.body if not is_docstring(s)]
    widening = body[0] if body and widening_of(body[0]) == logits else None
    return ConsumerFacts(func, logits, widening), []  # type: ignore[arg-type]


def is_docstring(stmt: cst.CSTNode) -> bool:
    return m.matches(stmt, m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString() | m.ConcatenatedString())]))
