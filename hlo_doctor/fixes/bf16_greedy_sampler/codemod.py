"""The edits of ``bf16-greedy-sampler``, one function per element, over libcst modules.

Each edit finds its anchors again on the module it is given (an earlier edit may have rebuilt the
tree), so edits compose in any order; comments and formatting are carried through by libcst, and a
comment starting with the fix id marks every line the codemod adds.
"""

from __future__ import annotations

from typing import cast

import libcst as cst

from hlo_doctor.fixes.bf16_greedy_sampler.elements import MARK
from hlo_doctor.fixes.bf16_greedy_sampler.precompile import analyze_gather_menu, analyze_precompile
from hlo_doctor.fixes.bf16_greedy_sampler.runner import analyze_runner
from hlo_doctor.fixes.bf16_greedy_sampler.sampler import analyze_consumer, analyze_sampler, is_docstring
from hlo_doctor.fixes.cst import comment_line, find_function


def rewrite(sources: dict[str, str], modules: dict[str, cst.Module], pending: set[str],
            context: dict[str, str]) -> dict[str, str]:
    """The new text of every file (role -> text) that applying the ``pending`` elements changes.

    ``context``: what one file's edit needs from another (``processed_test``, the runner's condition
    for feeding logprobs sample()'s output, as the compilation manager spells it; ``float32``).
    """
    out: dict[str, str] = {}
    runner = modules["runner"]
    if "runner.post_sample_widening" in pending:
        runner = _drop_post_widening(runner)
    if "runner.eager_widening" in pending:
        runner = _drop_eager_widening(runner)
    if runner is not modules["runner"]:
        out["runner"] = runner.code
    sampler = modules["sampler"]
    if "sampler.argmax_on_input" in pending:
        sampler = _move_argmax_first(sampler)
    if "sampler.logprobs_gated_output" in pending:
        sampler = _gate_returned_logits(sampler)
    if "sampler.logprobs_widening_in_graph" in pending:
        sampler = _widen_in_consumer(sampler, context["float32"])
    if sampler is not modules["sampler"]:
        out["sampler"] = sampler.code
    precompile = modules["precompile"]
    if "precompile.sampling_dtype" in pending:
        precompile = _rekey_menu(precompile, sources["precompile"])
    if "precompile.logprobs_dtype" in pending:
        precompile = _rekey_logprobs_menu(precompile, sources["precompile"], context["processed_test"])
    if precompile is not modules["precompile"]:
        out["precompile"] = precompile.code
    return out


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
    facts, _ = analyze_runner(module)
    assert facts is not None and facts.eager is not None
    body = list(facts.with_block.body)
    with_stmt = body[facts.with_index]
    assert isinstance(with_stmt, cst.With)
    # Comments above the dropped line move onto the `with`, so none is lost.
    new_with = with_stmt.with_changes(
        leading_lines=[
            *facts.eager.leading_lines,
            *with_stmt.leading_lines,
            comment_line(f"{MARK}: sample() takes the logits in the model dtype; it widens them in-graph."),
        ]
    )
    new_body = body[: facts.with_index - 1] + [new_with] + body[facts.with_index + 1 :]
    return _replace(module, "_sample_from_logits", facts.with_block, facts.with_block.with_changes(body=new_body))


def _drop_post_widening(module: cst.Module) -> cst.Module:
    """Remove the widening after sampling (unconditional, or under ``if logprobs:``): the logprobs
    computation widens its input in-graph, so no step runs an eager convert program."""
    facts, _ = analyze_runner(module)
    assert facts is not None and facts.post is not None
    func = find_function(module, "_sample_from_logits", method=True)
    assert func is not None
    body = list(func.body.body)
    at = next(i for i, stmt in enumerate(body) if stmt is facts.post)
    assert at + 1 < len(body)
    # Comments above the dropped statement move onto the next one, except the earlier version's own.
    kept = [line for line in facts.post.leading_lines  # type: ignore[attr-defined]
            if not (line.comment and line.comment.value.startswith(f"# {MARK}:"))]
    following = body[at + 1]
    body[at + 1] = following.with_changes(leading_lines=[
        *kept,
        comment_line(f"{MARK}: no eager float32 widening here: compute_and_gather_logprobs widens in-graph."),
        *following.leading_lines,  # type: ignore[attr-defined]
    ])
    del body[at]
    return _replace(module, "_sample_from_logits", func.body, func.body.with_changes(body=body))


def _widen_in_consumer(module: cst.Module, float32: str) -> cst.Module:
    """``logits = logits.astype(float32)`` first in the jitted ``compute_and_gather_logprobs``."""
    facts, _ = analyze_consumer(module)
    assert facts is not None and facts.widening is None
    body = list(facts.func.body.body)
    at = 1 if body and is_docstring(body[0]) else 0
    var = facts.logits_param
    widening = cst.parse_statement(f"{var} = {var}.astype({float32})")
    # The log-softmax must read a materialized float32 array, as it did when the runner widened:
    # XLA:GPU otherwise fuses the widening into the reductions, which then round differently
    # (logprobs off by up to 9.5e-07 on an H200). The barrier keeps the same reductions, bit for bit.
    barrier = cst.parse_statement(f"{var} = jax.lax.optimization_barrier({var})")
    body[at:at] = [
        widening.with_changes(leading_lines=[
            comment_line(f"{MARK}: the runner passes the model's logits; widen them here, in this program,"),
            comment_line(f"{MARK}: materialized (the barrier) so the logprobs stay bit-identical on every backend."),
        ]),
        barrier,
    ]
    return _replace(module, "compute_and_gather_logprobs", facts.func.body, facts.func.body.with_changes(body=body))


def _rekey_logprobs_menu(module: cst.Module, source: str, processed_test: str) -> cst.Module:
    """The logprobs menu's dummy logits: float32 for processed logprobs, else the model dtype."""
    facts, _ = analyze_gather_menu(module, source)
    assert facts is not None and facts.state == "original"
    f32 = cst.Module(body=[]).code_for_node(facts.dtype_arg.value)
    new_arg = facts.dtype_arg.with_changes(
        value=cst.parse_expression(f"{f32} if {processed_test} else {facts.model_dtype}"))
    stmt = facts.dtype_stmt.deep_replace(facts.dtype_arg, new_arg)
    assert isinstance(stmt, cst.SimpleStatementLine)
    stmt = stmt.with_changes(leading_lines=[
        *stmt.leading_lines,
        comment_line(f"{MARK}: the runner passes its own logits (model dtype) unless logprobs read sample()'s."),
    ])
    return _replace(module, "_precompile_gather_logprobs", facts.dtype_stmt, stmt)


def _move_argmax_first(module: cst.Module) -> cst.Module:
    facts, _, _ = analyze_sampler(module)
    assert facts is not None
    body = [s for s in facts.func.body.body if s is not facts.argmax]
    at = body.index(facts.widening)
    body.insert(at, facts.argmax)
    return _replace(module, "sample", facts.func.body, facts.func.body.with_changes(body=body))


def _gate_returned_logits(module: cst.Module) -> cst.Module:
    facts, _, _ = analyze_sampler(module)
    assert facts is not None and facts.gate is None
    gate = cst.If(
        test=cst.parse_expression(f"not {facts.meta}.logprobs"),
        body=cst.IndentedBlock(body=[cst.parse_statement(f"{facts.ret_logits} = None")]),
        leading_lines=[
            comment_line(f"{MARK}: logprobs is static, so without logprobs this program returns no logits"),
            comment_line("and XLA materializes no float32 copy of them."),
        ],
    )
    body = list(facts.func.body.body)
    at = body.index(facts.ret)
    body.insert(at, gate)
    return _replace(module, "sample", facts.func.body, facts.func.body.with_changes(body=body))


def _rekey_menu(module: cst.Module, source: str) -> cst.Module:
    facts, _ = analyze_precompile(module, source)
    assert facts is not None and facts.is_f32
    stmt = facts.dtype_stmt
    assert isinstance(stmt, cst.SimpleStatementLine)
    new_arg = facts.dtype_arg.with_changes(value=cst.parse_expression(facts.model_dtype))
    new_stmt = stmt.deep_replace(facts.dtype_arg, new_arg)
    assert isinstance(new_stmt, cst.SimpleStatementLine)
    new_stmt = new_stmt.with_changes(
        leading_lines=[
            *stmt.leading_lines,
            comment_line(f"{MARK}: the menu is keyed on the logits dtype; sample() now receives the model dtype."),
        ]
    )
    return _replace(module, "_precompile_sampling", stmt, new_stmt)
