"""A parsed file with positions and parents, and the one way a file fix changes it.

A fix finds what it changes in a :class:`Code` (libcst keeps every comment and every byte of
formatting it does not touch) and describes the change as a :class:`Plan`: nodes to replace, remove
or put statements beside, and modules to import. :class:`Codemod` runs the plans of one line or of a
whole file in one pass, so that no plan sees positions another one has shifted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, TypeVar, Union

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, ParentNodeProvider, PositionProvider

from hlo_doctor.fixes.source.base import (
    Hint,
    NotApplicable,
    NotApplicableKind,
    Rewritten,
    SiteEdit,
    SiteOutcome,
    SourceExample,
)

if TYPE_CHECKING:
    from hlo_doctor.core.model import Finding

__all__ = ["Change", "Code", "Codemod", "Plan", "Result", "SourceSyntaxError", "remove_line"]

N = TypeVar("N", bound=cst.CSTNode)
Result = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel[cst.BaseStatement]]  # noqa: UP007
# What a plan does to a node: a replacement, or a function of the node as the other changes left it
# (so that a change of a statement and a change inside it both land).
Change = Union[Result, Callable[[cst.CSTNode], Result]]  # noqa: UP007


class SourceSyntaxError(ValueError):
    """The file is not Python that libcst can parse (the message names the line)."""


class Code:
    """One parsed file: its module, the position and the parent of every node."""

    def __init__(self, text: str) -> None:
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            raise SourceSyntaxError(f"not valid Python (line {exc.raw_line}: {exc.message})") from exc
        self.text = text
        self.wrapper = MetadataWrapper(module)
        self.module = self.wrapper.module
        self._pos: Mapping[cst.CSTNode, CodeRange] = self.wrapper.resolve(PositionProvider)
        self._parents: Mapping[cst.CSTNode, cst.CSTNode] = self.wrapper.resolve(ParentNodeProvider)
        self._by_kind: dict[type[cst.CSTNode], list[cst.CSTNode]] = {}

    def line(self, node: cst.CSTNode) -> int:
        """The first line of ``node``."""
        return int(self._pos[node].start.line)

    def end_line(self, node: cst.CSTNode) -> int:
        """The last line of ``node``."""
        return int(self._pos[node].end.line)

    def position(self, node: cst.CSTNode) -> tuple[int, int]:
        """(line, column) where ``node`` starts: the order of reading."""
        start = self._pos[node].start
        return int(start.line), int(start.column)

    def end_position(self, node: cst.CSTNode) -> tuple[int, int]:
        """(line, column) where ``node`` ends."""
        end = self._pos[node].end
        return int(end.line), int(end.column)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The node holding ``node`` (None for the module)."""
        return self._parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """The nodes holding ``node``, innermost first."""
        current = self._parents.get(node)
        while current is not None:
            yield current
            current = self._parents.get(current)

    def enclosing(self, node: cst.CSTNode, kind: type[N]) -> N | None:
        """The innermost ancestor of type ``kind``."""
        return next((a for a in self.ancestors(node) if isinstance(a, kind)), None)

    def all(self, kind: type[N], under: cst.CSTNode | None = None) -> list[N]:
        """Every node of type ``kind`` (under ``under``), in reading order."""
        if under is None and kind in self._by_kind:
            return list(self._by_kind[kind])  # type: ignore[arg-type]
        found: list[N] = []

        class _Find(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                if isinstance(node, kind):
                    found.append(node)
                return True

        (under or self.module).visit(_Find())
        if under is None:
            self._by_kind[kind] = list(found)
        return found

    def statement_of(self, node: cst.CSTNode) -> cst.BaseSmallStatement | None:
        """The simple statement (``x = ...``, ``return ...``) holding ``node``."""
        return next((a for a in self.ancestors(node) if isinstance(a, cst.BaseSmallStatement)), None)

    def statement_at(self, line: int) -> cst.BaseSmallStatement | None:
        """The innermost simple statement (``x = ...``, ``return ...``) whose lines hold ``line``."""
        best: cst.BaseSmallStatement | None = None
        small = [s for line_ in self.all(cst.SimpleStatementLine) for s in line_.body]
        for stmt in small:
            if self.line(stmt) <= line <= self.end_line(stmt):
                if best is None or self.end_line(stmt) - self.line(stmt) < self.end_line(best) - self.line(best):
                    best = stmt
        return best

    def function_at(self, line: int) -> cst.FunctionDef | None:
        """The innermost function whose body (or ``def`` line) holds ``line``."""
        best: cst.FunctionDef | None = None
        for fn in self.all(cst.FunctionDef):
            if self.line(fn) <= line <= self.end_line(fn):
                best = fn  # reading order: an inner function comes after its outer one
        return best

    def source_of(self, node: cst.CSTNode) -> str:
        """The code of ``node`` as written."""
        return self.module.code_for_node(node)


@dataclass
class Plan:
    """One place to change: the edit reported, the node changes, the imports it needs."""

    edit: SiteEdit
    changes: dict[cst.CSTNode, Change] = field(default_factory=dict)
    imports: tuple[str, ...] = ()


def remove_line(code: Code, stmt: cst.BaseSmallStatement, *,
                describes: Callable[[str], bool] | None = None) -> dict[cst.CSTNode, Change] | None:
    """Changes removing the line of ``stmt`` (its comments go to the next line); None when it cannot go.

    ``describes``: whether a comment above the line speaks of what the line did (a ``# widen to f32``
    over a removed widening); such comments go with the line: moved to the next line they would
    describe code that no longer does it.
    """
    line = code.parent(stmt)
    block = code.parent(line) if line is not None else None
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    if len(body) < 2 or line not in body:
        return None
    changes: dict[cst.CSTNode, Change] = {line: cst.RemovalSentinel.REMOVE}
    i = body.index(line)
    moved = list(line.leading_lines)
    if describes is not None:
        moved = [ln for ln in moved if ln.comment is None or not describes(ln.comment.value)]
    comments = [ln for ln in moved if ln.comment is not None]
    if comments and i + 1 < len(body):
        nxt = body[i + 1]
        changes[nxt] = lambda node: node.with_changes(leading_lines=[*moved, *getattr(node, "leading_lines", ())])
    return changes


class _Apply(cst.CSTTransformer):
    def __init__(self, changes: Mapping[cst.CSTNode, Change]) -> None:
        super().__init__()
        self.changes = changes

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Result:  # type: ignore[override]
        change = self.changes.get(original_node, updated_node)
        return change(updated_node) if callable(change) else change


def _covers(code: Code, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    return inner is outer or any(a is outer for a in code.ancestors(inner))


def _import_line(name: str) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine(body=[cst.Import(names=[cst.ImportAlias(name=cst.Name(name))])])


def _imported(module: cst.Module, name: str) -> bool:
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import) and any(
                        cst.helpers.get_full_name_for_node(a.name) == name and a.asname is None for a in small.names):
                    return True
    return False


def _with_imports(module: cst.Module, names: tuple[str, ...]) -> cst.Module:
    """``module`` with ``import NAME`` added for each name not imported yet (beside the imports,
    in alphabetical place, after ``from __future__``)."""
    for name in names:
        if _imported(module, name):
            continue
        body = list(module.body)
        at = 0
        for i, stmt in enumerate(body):
            if not isinstance(stmt, cst.SimpleStatementLine) or not isinstance(stmt.body[0], (cst.Import, cst.ImportFrom)):
                if i == 0 and isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr):
                    at = 1  # the module docstring
                continue
            small = stmt.body[0]
            first = (cst.helpers.get_full_name_for_node(small.names[0].name) if isinstance(small, cst.Import)
                     else cst.helpers.get_full_name_for_node(small.module) if small.module else "") or ""
            if first == "__future__" or first < name:
                at = i + 1
            else:
                at = i
                break
        new = _import_line(name)
        if at < len(body) and at > 0 and not isinstance(body[at - 1], cst.SimpleStatementLine):
            new = new.with_changes(leading_lines=[cst.EmptyLine()])
        body.insert(at, new)
        module = module.with_changes(body=body)
    return module


class Codemod:
    """The shared driver of a file fix: one line or the whole file, plans applied in one pass.

    A fix subclasses it and writes :meth:`find` (the plan at one line, or why not) and
    :meth:`candidates` (the lines where the whole-file mode looks).
    """

    fix_id: ClassVar[str] = ""
    title: ClassVar[str] = ""
    walks_stack: ClassVar[bool] = False
    VALID: ClassVar[tuple[SourceExample, ...]] = ()
    INVALID: ClassVar[tuple[SourceExample, ...]] = ()

    def hint(self, finding: Finding) -> Hint:
        """What ``finding`` says that this fix reads (nothing, unless a fix says otherwise)."""
        return Hint()

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """The change at ``line``, or why there is none."""
        raise NotImplementedError

    def candidates(self, code: Code) -> list[int]:
        """The lines where the pattern may be, for the whole-file mode."""
        raise NotImplementedError

    def rewrite(self, text: str, line: int | None, hint: Hint) -> SiteOutcome:
        """Rewrite ``text`` at ``line`` (every place, when None); see :class:`SourceFix`."""
        try:
            code = Code(text)
        except SourceSyntaxError as exc:
            return NotApplicable(str(exc), "no-pattern")
        if line is not None:
            found = self.find(code, line, hint)
            if isinstance(found, NotApplicable):
                return found
            plans, passed = [found], []
        else:
            plans, refusals = [], []
            for at in self.candidates(code):
                found = self.find(code, at, hint)
                if isinstance(found, NotApplicable):
                    refusals.append((at, found))
                elif not any(_covers(code, old, new) or _covers(code, new, old)
                             for p in plans for old in p.changes for new in found.changes):
                    plans.append(found)
            passed = [f"line {at}: {r.reason}" for at, r in refusals if r.kind != "no-pattern"]
            if not plans:
                kinds = {r.kind for _, r in refusals}
                kind: NotApplicableKind = ("refused" if "refused" in kinds else
                                           "already-applied" if "already-applied" in kinds else "no-pattern")
                reason = "; ".join(passed) if passed else f"nothing in the file holds the pattern of {self.fix_id}"
                return NotApplicable(reason, kind)
        changes: dict[cst.CSTNode, Change] = {}
        for p in plans:
            changes.update(p.changes)
        module = code.module.visit(_Apply(changes))
        imports = tuple(dict.fromkeys(name for p in plans for name in p.imports))
        module = _with_imports(module, imports)
        return Rewritten(module.code, tuple(p.edit for p in plans), tuple(passed))
