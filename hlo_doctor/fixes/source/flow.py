"""Where a name is read and bound inside a function, in reading order: what the fixes' safety rests on.

The analysis is textual and conservative: a read anywhere after a point counts as a read after it
(even on another branch), a read inside a nested function or lambda counts wherever it is (a closure
can run later), and a name passed inside a loop counts as read again on the next iteration. A fix
refuses rather than guess; the refusal names the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import libcst as cst

from hlo_doctor.fixes.source.code import Code

__all__ = ["Use", "assigned_names", "first_use_after", "loops_around", "name_uses", "reads_after", "scope_of"]

UseKind = Literal["load", "store", "del"]


@dataclass(frozen=True, slots=True)
class Use:
    """One occurrence of a name: the node, its kind, and whether it sits in a nested scope."""

    node: cst.Name
    kind: UseKind
    nested: bool
    line: int
    column: int

    @property
    def position(self) -> tuple[int, int]:
        """(line, column)."""
        return self.line, self.column


class _Uses(cst.CSTVisitor):
    """Collects the uses of one name under a scope node (see :func:`name_uses`)."""

    def __init__(self, code: Code, name: str, root: cst.CSTNode) -> None:
        super().__init__()
        self.code, self.name, self.root = code, name, root
        self.depth = 0
        self.store = 0
        self.uses: list[Use] = []

    def _add(self, node: cst.Name, kind: UseKind) -> None:
        if node.value == self.name:
            line, column = self.code.position(node)
            self.uses.append(Use(node, kind, self.depth > 0, line, column))

    def _visit_stored(self, target: cst.CSTNode) -> None:
        self.store += 1
        target.visit(self)
        self.store -= 1

    def _nested(self, node: cst.CSTNode, *parts: cst.CSTNode | None) -> None:
        self.depth += 0 if node is self.root else 1
        for part in parts:
            if part is not None:
                part.visit(self)
        self.depth -= 0 if node is self.root else 1

    def visit_Name(self, node: cst.Name) -> bool:
        self._add(node, "store" if self.store else "load")
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        saved, self.store = self.store, 0  # `a.b = x` reads a
        node.value.visit(self)
        self.store = saved
        return False

    def visit_Subscript(self, node: cst.Subscript) -> bool:
        saved, self.store = self.store, 0  # `a[i] = x` reads a and i
        node.value.visit(self)
        for element in node.slice:
            element.visit(self)
        self.store = saved
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # not the keyword's name
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        self._add(node.name, "store")
        for part in (node.annotation, node.default):
            if part is not None:
                part.visit(self)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        self._visit_stored(node.target)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        node.annotation.visit(self)
        if node.value is not None:
            node.value.visit(self)
        self._visit_stored(node.target)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        node.value.visit(self)
        node.target.visit(self)
        self._visit_stored(node.target)
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> bool:
        node.value.visit(self)
        self._visit_stored(node.target)
        return False

    def visit_For(self, node: cst.For) -> bool:
        node.iter.visit(self)
        self._visit_stored(node.target)
        node.body.visit(self)
        if node.orelse is not None:
            node.orelse.visit(self)
        return False

    def visit_WithItem(self, node: cst.WithItem) -> bool:
        node.item.visit(self)
        if node.asname is not None:
            self._visit_stored(node.asname.name)
        return False

    def visit_CompFor(self, node: cst.CompFor) -> bool:
        node.iter.visit(self)
        self._visit_stored(node.target)
        for cond in node.ifs:
            cond.visit(self)
        if node.inner_for_in is not None:
            node.inner_for_in.visit(self)
        return False

    def visit_Del(self, node: cst.Del) -> bool:
        if isinstance(node.target, cst.Name):
            self._add(node.target, "del")
            return False
        return True

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        bound: cst.BaseExpression = node.asname.name if node.asname is not None else node.name
        while isinstance(bound, cst.Attribute):
            bound = bound.value
        if isinstance(bound, cst.Name):
            self._add(bound, "store")
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for deco in node.decorators:
            deco.visit(self)
        if node is not self.root:
            self._add(node.name, "store")
        self._nested(node, node.params, node.body)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        for deco in node.decorators:
            deco.visit(self)
        for arg in node.bases:
            arg.visit(self)
        self._add(node.name, "store")
        self._nested(node, node.body)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        self._nested(node, node.params, node.body)
        return False

    def _comprehension(self, node: cst.BaseComp) -> bool:
        self._nested(node, *(getattr(node, part, None) for part in ("elt", "key", "value", "for_in")))
        return False

    def visit_ListComp(self, node: cst.ListComp) -> bool:
        return self._comprehension(node)

    def visit_SetComp(self, node: cst.SetComp) -> bool:
        return self._comprehension(node)

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> bool:
        return self._comprehension(node)

    def visit_DictComp(self, node: cst.DictComp) -> bool:
        return self._comprehension(node)


def name_uses(code: Code, scope: cst.FunctionDef | cst.Module, name: str) -> list[Use]:
    """Every use of ``name`` in ``scope`` (its parameters, body and nested scopes), in reading order."""
    visitor = _Uses(code, name, scope)
    if isinstance(scope, cst.FunctionDef):
        visitor.visit_FunctionDef(scope)
    else:
        scope.visit(visitor)
    return sorted(visitor.uses, key=lambda u: u.position)


def scope_of(code: Code, node: cst.CSTNode) -> cst.FunctionDef | cst.Module:
    """The function ``node`` runs in (a lambda or comprehension counts as its function), else the module."""
    return code.enclosing(node, cst.FunctionDef) or code.module


def loops_around(code: Code, node: cst.CSTNode, scope: cst.CSTNode) -> list[cst.For | cst.While]:
    """The ``for``/``while`` statements of ``scope`` that hold ``node``, innermost first."""
    loops: list[cst.For | cst.While] = []
    for a in code.ancestors(node):
        if a is scope:
            break
        if isinstance(a, (cst.For, cst.While)):
            loops.append(a)
    return loops


def first_use_after(uses: list[Use], after: tuple[int, int], *, until: tuple[int, int] | None = None,
                    own_scope_only: bool = True) -> Use | None:
    """The first use at or after ``after`` (and before ``until``), in reading order."""
    for u in uses:
        if own_scope_only and u.nested:
            continue
        if u.position >= after and (until is None or u.position < until):
            return u
    return None


def assigned_names(target: cst.BaseAssignTargetExpression | cst.BaseExpression) -> list[str]:
    """The plain names bound by an assignment target (``a``, ``a, (b, c)``)."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in assigned_names(e.value)]
    if isinstance(target, cst.StarredElement):
        return assigned_names(target.value)
    return []


def reads_after(code: Code, stmt: cst.BaseSmallStatement, name: str) -> list[cst.Name] | str:
    """The reads of ``name`` after ``stmt`` binds it, up to its next binding, in ``stmt``'s function.

    A reason instead when a nested function or lambda reads it (a closure can run at any time, so
    its reads cannot be placed) or when nothing reads it after ``stmt``.
    """
    after = code.end_position(stmt)
    names: list[cst.Name] = []
    for u in name_uses(code, scope_of(code, stmt), name):
        if u.nested and u.kind == "load":
            return f"{name} is read by a nested function or lambda at line {u.line}"
        if u.position < after or u.nested:
            continue
        if u.kind != "load":
            break
        names.append(u.node)
    return names or f"{name} is never read after line {code.line(stmt)}"
