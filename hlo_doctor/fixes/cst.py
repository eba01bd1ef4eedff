"""Structural matching helpers over libcst trees, shared by the codemods.

Everything matches by shape (names, calls, statement order), never by line number; comments and
formatting are carried through untouched because libcst keeps them in the tree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

FLOAT32_NAMES = frozenset({"jnp.float32", "jax.numpy.float32", "np.float32", "numpy.float32"})

# `x = <anything>` with one plain name as the only target.
_NAME_ASSIGN = m.Assign(targets=[m.AssignTarget(target=m.Name())])
# `<expr>.astype(<first arg>, ...)`.
_ASTYPE_CALL = m.Call(func=m.Attribute(attr=m.Name("astype")), args=[m.Arg(), m.ZeroOrMore()])


def dotted(expr: cst.BaseExpression | None) -> str | None:
    """``a.b.c`` for a plain Name/Attribute chain, else None (a call or subscript in the chain is not a name)."""
    node = expr
    while isinstance(node, cst.Attribute):
        node = node.value
    if not isinstance(node, cst.Name) or expr is None:
        return None
    return get_full_name_for_node(expr)


def is_float32(expr: cst.BaseExpression | None) -> bool:
    """Whether ``expr`` names float32 (``jnp.float32`` and friends)."""
    return dotted(expr) in FLOAT32_NAMES


def is_call_to(node: cst.CSTNode, names: str | tuple[str, ...], *, min_positional: int = 0) -> bool:
    """Whether ``node`` calls one of ``names`` (dotted) with at least ``min_positional`` positional args."""
    wanted = (names,) if isinstance(names, str) else names
    return isinstance(node, cst.Call) and dotted(node.func) in wanted and len(positional_args(node)) >= min_positional


def single_assign(stmt: cst.CSTNode) -> cst.Assign | None:
    """The ``Assign`` of a one-statement line, else None."""
    if isinstance(stmt, cst.SimpleStatementLine) and m.matches(stmt, m.SimpleStatementLine(body=[m.Assign()])):
        return cst.ensure_type(stmt.body[0], cst.Assign)
    return None


def assigned_name(assign: cst.Assign) -> str | None:
    """The single plain name assigned by ``assign`` (``x = ...``), else None."""
    if m.matches(assign, _NAME_ASSIGN):
        return cst.ensure_type(assign.targets[0].target, cst.Name).value
    return None


def widening_of(stmt: cst.CSTNode) -> str | None:
    """``x`` when ``stmt`` is ``x = x.astype(<float32>)``, the widening convert; else None."""
    assign = single_assign(stmt)
    if assign is None or not m.matches(assign.value, _ASTYPE_CALL):
        return None
    name = assigned_name(assign)
    call = cst.ensure_type(assign.value, cst.Call)
    receiver = cst.ensure_type(call.func, cst.Attribute).value
    if name is None or dotted(receiver) != name:
        return None
    return name if is_float32(call.args[0].value) else None


def positional_args(call: cst.Call) -> list[cst.Arg]:
    """The positional arguments of ``call`` (no keyword, no star)."""
    return [a for a in call.args if a.keyword is None and not a.star]


def find_function(module: cst.Module, name: str, *, method: bool) -> cst.FunctionDef | None:
    """The first function ``name``: a method of any top-level class, or a top-level function."""
    wanted = m.FunctionDef(name=m.Name(name))
    for stmt in module.body:
        if method and isinstance(stmt, cst.ClassDef):
            for inner in stmt.body.body:
                if m.matches(inner, wanted):
                    return cst.ensure_type(inner, cst.FunctionDef)
        if not method and m.matches(stmt, wanted):
            return cst.ensure_type(stmt, cst.FunctionDef)
    return None


def iter_blocks(node: cst.CSTNode) -> Iterator[cst.IndentedBlock]:
    """Every indented block under ``node``, outermost first."""
    for block in m.findall(node, m.IndentedBlock()):
        yield cst.ensure_type(block, cst.IndentedBlock)


def contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    """Whether ``target`` (by identity) is ``node`` or lies under it."""
    return node is target or bool(m.findall(node, m.MatchIfTrue(lambda n: n is target)))


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call expression under ``node``, in source order."""
    return [cst.ensure_type(c, cst.Call) for c in m.findall(node, m.Call())]


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
