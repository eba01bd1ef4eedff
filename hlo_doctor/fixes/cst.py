"""Structural matching helpers over libcst trees, shared by the codemods.

Everything matches by shape (names, calls, statement order), never by line number; comments and
formatting are carried through untouched because libcst keeps them in the tree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

FLOAT32_NAMES = frozenset({"jnp.float32", "jax.numpy.float32", "np.float32", "numpy.float32"})


def dotted(expr: cst.BaseExpression | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        head = dotted(expr.value)
        return f"{head}.{expr.attr.value}" if head is not None else None
    return None


def is_float32(expr: cst.BaseExpression | None) -> bool:
    """Whether ``expr`` names float32 (``jnp.float32`` and friends)."""
    return dotted(expr) in FLOAT32_NAMES


def single_assign(stmt: cst.CSTNode) -> cst.Assign | None:
    """The ``Assign`` of a one-statement line, else None."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        return stmt.body[0]
    return None


def assigned_name(assign: cst.Assign) -> str | None:
    """The single plain name assigned by ``assign`` (``x = ...``), else None."""
    if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
        return assign.targets[0].target.value
    return None


def widening_of(stmt: cst.CSTNode) -> str | None:
    """``x`` when ``stmt`` is ``x = x.astype(<float32>)``, the widening convert; else None."""
    assign = single_assign(stmt)
    if assign is None:
        return None
    name = assigned_name(assign)
    call = assign.value
    if name is None or not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
        return None
    if call.func.attr.value != "astype" or dotted(call.func.value) != name or not call.args:
        return None
    return name if is_float32(call.args[0].value) else None


def positional_args(call: cst.Call) -> list[cst.Arg]:
    """The positional arguments of ``call`` (no keyword, no star)."""
    return [a for a in call.args if a.keyword is None and not a.star]


def find_function(module: cst.Module, name: str, *, method: bool) -> cst.FunctionDef | None:
    """The first function ``name``: a method of any top-level class, or a top-level function."""
    for stmt in module.body:
        if method and isinstance(stmt, cst.ClassDef):
            for inner in stmt.body.body:
                if isinstance(inner, cst.FunctionDef) and inner.name.value == name:
                    return inner
        if not method and isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


def iter_blocks(node: cst.CSTNode) -> Iterator[cst.IndentedBlock]:
    """Every indented block under ``node``, outermost first."""

    class _Collector(cst.CSTVisitor):
        def __init__(self) -> None:
            self.blocks: list[cst.IndentedBlock] = []

        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            self.blocks.append(node)

    collector = _Collector()
    node.visit(collector)
    yield from collector.blocks


def contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    """Whether ``target`` (by identity) is ``node`` or lies under it."""

    class _Finder(cst.CSTVisitor):
        found = False

        def on_visit(self, n: cst.CSTNode) -> bool:
            if n is target:
                self.found = True
            return not self.found

    finder = _Finder()
    node.visit(finder)
    return finder.found


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call expression under ``node``."""

    class _Calls(cst.CSTVisitor):
        def __init__(self) -> None:
            self.calls: list[cst.Call] = []

        def visit_Call(self, n: cst.Call) -> None:
            self.calls.append(n)

    visitor = _Calls()
    node.visit(visitor)
    return visitor.calls


class Located:
    """A parsed module that can say on which line a node starts, for reporting.

    Positions are resolved per function (a module-wide resolution costs about a second on a
    3,000-line runner): the function is re-rooted in a module of its own, its ``def`` line found in
    the source, and the two added.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.module = cst.parse_module(source)
        self._positions: dict[int, tuple[int, cst.FunctionDef, Mapping[cst.CSTNode, CodeRange]]] = {}

    @classmethod
    def parse(cls, source: str) -> Located:
        """Parse ``source``."""
        return cls(source)

    def line_in(self, func: cst.FunctionDef, node: cst.CSTNode) -> int:
        """The first line of ``node`` (a node under ``func``), or 0 when it cannot be told."""
        key = id(func)
        if key not in self._positions:
            pattern = re.compile(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(func.name.value)}[ \t]*\(", re.MULTILINE)
            matches = list(pattern.finditer(self.source))
            if len(matches) != 1:
                return 0
            def_line = self.source.count("\n", 0, matches[0].start()) + 1
            alone = func.with_changes(leading_lines=(), decorators=())
            wrapper = MetadataWrapper(cst.Module(body=[alone]), unsafe_skip_copy=True)
            self._positions[key] = (def_line, alone, wrapper.resolve(PositionProvider))
        def_line, alone, positions = self._positions[key]
        target = alone if node is func else node
        try:
            return def_line + int(positions[target].start.line) - 1
        except KeyError:
            return 0


def comment_line(text: str) -> cst.EmptyLine:
    """A comment line to put above a statement (``text`` without the leading ``#``)."""
    return cst.EmptyLine(comment=cst.Comment(f"# {text}"))
