"""``slice-before-matmul``: slice a matmul's input, not its result (HD012).

``(x @ W)[:, -1]`` computes the logits of every position and keeps one: ``x[:, -1] @ W`` computes
that one only, with the same shape (an integer index drops the dimension on ``x`` as it did on the
result; ``x[:, -1:] @ W`` would keep it). The finding's line holds the matmul (``logits = h @ w``)
whose every reader is the same static subscript (``logits[:, -1]``), or the subscripted matmul
itself.

The index moves only when it is static (integers and slices of integers, no names, no ``...`` or
``None``) and leaves the matmul's last dimension whole: fewer index entries than the result has
dimensions (the rank comes from the finding's HLO shape), or a last entry that is ``:``. ``W`` is
taken to be a matrix, as an LM head's is. Unsafe: a matmul over fewer rows may be tiled, and so
rounded, differently on some backends; ``verify`` checks the outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.slice_before_matmul.examples import INVALID, VALID
from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceExample
from hlo_doctor.fixes.source.code import Change, Code, Codemod, Plan
from hlo_doctor.fixes.source.flow import name_uses, reads_after, scope_of

if TYPE_CHECKING:
    from hlo_doctor.core.model import Finding

__all__ = ["FIX", "SliceBeforeMatmul"]

_MATMUL_CALLS = frozenset({"jnp.matmul", "jnp.dot", "jax.numpy.matmul", "jax.numpy.dot"})
_NOTE = ("a matmul over fewer rows may be tiled, and rounded, differently on some backends; W is taken to be a "
         "matrix: verify")


def _operands(node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """``(x, W)`` of ``x @ W``, ``jnp.matmul(x, W)``, ``jnp.dot(x, W)``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return node.left, node.right
    if isinstance(node, cst.Call) and (get_full_name_for_node(node.func) or "") in _MATMUL_CALLS and \
            len(node.args) == 2 and all(a.keyword is None and not a.star for a in node.args):
        return node.args[0].value, node.args[1].value
    return None


def _int(node: cst.BaseExpression | None) -> bool:
    if node is None:
        return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node = node.expression
    return isinstance(node, cst.Integer)


def _static(index: cst.Subscript) -> str:
    """Why the subscript is not a static index ("" when it is)."""
    for element in index.slice:
        s = element.slice
        if isinstance(s, cst.Index):
            if not _int(s.value) or s.star is not None:
                return f"{cst.Module([]).code_for_node(s.value)} is not a constant integer"
        elif isinstance(s, cst.Slice):
            if not all(_int(part) for part in (s.lower, s.upper, s.step)):
                return "a slice bound is not a constant integer"
    return ""


def _full(element: cst.SubscriptElement) -> bool:
    s = element.slice
    return isinstance(s, cst.Slice) and s.lower is None and s.upper is None and s.step is None


def _rank_problem(index: cst.Subscript, rank: int | None) -> str:
    n = len(index.slice)
    if _full(index.slice[-1]):
        return ""
    if rank is None:
        return ("the rank of the matmul's result is not known from the source (apply it from a diagnosis, or end "
                "the index with ':')")
    if n >= rank:
        return f"the index ({n} entries) reaches the matmul's last dimension (rank {rank})"
    return ""


def _sliced(matmul: cst.BaseExpression, index: cst.Subscript, *, keep_parens: bool) -> cst.BaseExpression:
    """``matmul`` with its left operand subscripted by ``index``."""
    ops = _operands(matmul)
    assert ops is not None
    x = ops[0]
    if not isinstance(x, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not x.lpar:
        x = x.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    sub = cst.Subscript(value=x, slice=index.slice)
    if isinstance(matmul, cst.BinaryOperation):
        new: cst.BaseExpression = matmul.with_changes(left=sub)
    else:
        assert isinstance(matmul, cst.Call)
        new = matmul.with_changes(args=[matmul.args[0].with_changes(value=sub), matmul.args[1]])
    return new if keep_parens else new.with_changes(lpar=(), rpar=())


class SliceBeforeMatmul(Codemod):
    """Move a static subscript of a matmul's result onto its left operand (module docstring)."""

    fix_id: ClassVar[str] = "slice-before-matmul"
    title: ClassVar[str] = "slice the input of a matmul, not its result"
    VALID: ClassVar[tuple[SourceExample, ...]] = VALID
    INVALID: ClassVar[tuple[SourceExample, ...]] = INVALID

    def hint(self, finding: Finding) -> Hint:
        """The rank of the matmul's result, from the finding's ``producer_shape`` (``f32[4,16,32000]``)."""
        shape = str(dict(finding.extra).get("producer_shape") or finding.shape)
        if "[" not in shape:
            return Hint()
        dims = shape.split("[", 1)[1].split("]", 1)[0]
        return Hint(rank=len([d for d in dims.split(",") if d.strip()]))

    def candidates(self, code: Code) -> list[int]:
        """Every line holding a matmul."""
        found: list[cst.CSTNode] = [n for n in code.all(cst.BinaryOperation) if _operands(n) is not None]
        found += [c for c in code.all(cst.Call) if _operands(c) is not None]
        return sorted({code.line(n) for n in found})

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """Slice first at ``line`` (the matmul, or the subscript reading it)."""
        stmt = code.statement_at(line)
        nothing = NotApplicable(f"line {line} holds no matmul (x @ W, jnp.matmul, jnp.dot) read through a subscript")
        if stmt is None:
            return nothing
        for sub in code.all(cst.Subscript, under=stmt):
            if _operands(sub.value) is not None:
                return self._inline(code, sub, hint)
        if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name) \
                and _operands(stmt.value) is not None:
            return self._named(code, stmt, stmt.targets[0].target.value, hint)
        scope = scope_of(code, stmt)
        for sub in code.all(cst.Subscript, under=stmt):
            if isinstance(sub.value, cst.Name):
                earlier = [u for u in name_uses(code, scope, sub.value.value)
                           if u.kind == "store" and not u.nested and u.position < code.position(stmt)]
                bound = code.statement_of(earlier[-1].node) if earlier else None
                if isinstance(bound, cst.Assign) and _operands(bound.value) is not None and len(bound.targets) == 1:
                    return self._named(code, bound, sub.value.value, hint)
        return nothing

    def _inline(self, code: Code, sub: cst.Subscript, hint: Hint) -> Plan | NotApplicable:
        problem = _static(sub) or _rank_problem(sub, hint.rank)
        if problem:
            return NotApplicable(problem, "refused")
        top = isinstance(code.parent(sub), (cst.Arg, cst.Assign, cst.Return, cst.Element))
        new = _sliced(sub.value, sub, keep_parens=not top)
        what = f"slice before the matmul: {code.source_of(new).strip()}"
        return Plan(SiteEdit(code.line(sub), what, False, _NOTE), {sub: new})

    def _named(self, code: Code, stmt: cst.Assign, name: str, hint: Hint) -> Plan | NotApplicable:
        reads = reads_after(code, stmt, name)
        if isinstance(reads, str):
            return NotApplicable(reads, "refused")
        readers: list[cst.Subscript] = []
        for node in reads:
            parent = code.parent(node)
            if not isinstance(parent, cst.Subscript) or parent.value is not node:
                what = code.source_of(code.statement_of(node) or node).strip()
                return NotApplicable(f"{name} is read whole at line {code.line(node)} ({what})", "refused")
            readers.append(parent)
        texts = {code.source_of(r.with_changes(value=cst.Name(name))) for r in readers}
        if len(texts) != 1:
            return NotApplicable(f"{name} is read through different subscripts: {', '.join(sorted(texts))}", "refused")
        problem = _static(readers[0]) or _rank_problem(readers[0], hint.rank)
        if problem:
            return NotApplicable(problem, "refused")
        new = _sliced(stmt.value, readers[0], keep_parens=False)
        changes: dict[cst.CSTNode, Change] = {stmt.value: new}
        for r in readers:
            changes[r] = cst.Name(name)
        what = (f"slice before the matmul: {name} = {code.source_of(new).strip()}; "
                f"{code.source_of(readers[0]).strip()} -> {name}")
        return Plan(SiteEdit(code.line(stmt), what, False, _NOTE), changes)


FIX = SliceBeforeMatmul()
