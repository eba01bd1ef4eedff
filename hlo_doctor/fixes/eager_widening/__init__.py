"""``eager-widening``: drop a widening whose only reader selects from it, or move it into the jit.

For HD003 (a program that only converts), HD001 and HD004 (a widened tensor read by an argmax):
the finding's line holds the widening (``x.astype(jnp.float32)``, ``jnp.asarray(x, dtype=...)``).
What reads the widened value decides (see :mod:`.analysis`):

- only argmax/argmin, directly or through a function jitted in this file: the widening is
  dropped. Safe when the finding says the widening is exact (bf16/f16 -> f32): the argmax of the
  narrow tensor is the argmax of the wide one, ties and NaN included. Without that, the source does
  not say what dtype ``x`` has, and the drop is marked unsafe;
- a jitted function that widens the parameter itself first: dropped, safe (the same values reach it);
- a jitted function that computes on it otherwise: the widening moves inside that function, as its
  first statement (unsafe: the function now also widens for its other callers);
- anything else (returned, stored, computed on eagerly): refused, naming the line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.eager_widening.analysis import Reader, Widening, read_by, widening_in
from hlo_doctor.fixes.eager_widening.examples import INVALID, VALID
from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceExample
from hlo_doctor.fixes.source.code import Change, Code, Codemod, Plan, Result, remove_line
from hlo_doctor.fixes.source.flow import name_uses, reads_after, scope_of

if TYPE_CHECKING:
    from hlo_doctor.core.model import Finding

__all__ = ["FIX", "EagerWidening"]

_WIDENING_WORDS = ("widen", "convert", "astype", "upcast", "cast", "float32", "f32", "float64", "f64")


def _describes_widening(comment: str) -> bool:
    """Whether a comment speaks of a widening (``# eager widening convert``, ``# upcast to f32``): it
    goes with the widening's line instead of moving above code that no longer widens."""
    text = comment.lower()
    return any(word in text for word in _WIDENING_WORDS)


EXACT = frozenset({("bf16", "f32"), ("f16", "f32"), ("bf16", "f64"), ("f16", "f64"), ("f32", "f64")})


def _widening_at(code: Code, line: int) -> tuple[cst.BaseSmallStatement, Widening] | None:
    stmt = code.statement_at(line)
    if stmt is None:
        return None
    found = [w for c in code.all(cst.Call, under=stmt) if (w := widening_in(c)) is not None]
    found.sort(key=lambda w: code.line(w.call) != line)
    return (stmt, found[0]) if found else None


def _readers(code: Code, stmt: cst.BaseSmallStatement, w: Widening) -> tuple[list[cst.Name], list[Reader]] | str:
    """The names read (case ``y = x.astype(...)``) and what reads them; a reason when it cannot tell."""
    if not (isinstance(stmt, cst.Assign) and stmt.value is w.call and len(stmt.targets) == 1
            and isinstance(stmt.targets[0].target, cst.Name)):
        return [], [read_by(code, w.call, w.wide)]
    names = reads_after(code, stmt, stmt.targets[0].target.value)
    if isinstance(names, str):
        return f"the widened {names}" if "never read" in names else names
    return names, [read_by(code, n, w.wide) for n in names]


def _move_into(code: Code, fn: cst.FunctionDef, param: str, dtype: str) -> dict[cst.CSTNode, Change] | str:
    if not isinstance(fn.body, cst.IndentedBlock):
        return f"{fn.name.value}() is written on one line"
    body = list(fn.body.body)
    first = 1 if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) \
        and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)) and len(body) > 1 else 0
    new = cst.parse_statement(f"{param} = {param}.astype({dtype})\n")
    anchor = body[first]

    def insert(node: cst.CSTNode) -> Result:
        assert isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        return cst.FlattenSentinel([new.with_changes(leading_lines=node.leading_lines),
                                    node.with_changes(leading_lines=())])
    return {anchor: insert}


class EagerWidening(Codemod):
    """Drop (or move into the jitted reader) a widening whose readers only select (module docstring)."""

    fix_id: ClassVar[str] = "eager-widening"
    title: ClassVar[str] = "drop an eager widening before a jitted selection"
    VALID: ClassVar[tuple[SourceExample, ...]] = VALID
    INVALID: ClassVar[tuple[SourceExample, ...]] = INVALID

    def hint(self, finding: Finding) -> Hint:
        """The dtypes of the widening: ``narrow_dtype`` (extra) and the wide one (extra, else the shape)."""
        extra = dict(finding.extra)
        wide = str(extra.get("wide_dtype") or finding.shape.split("[", 1)[0])
        return Hint(narrow_dtype=str(extra.get("narrow_dtype", "")), wide_dtype=wide)

    def candidates(self, code: Code) -> list[int]:
        """Every line holding a widening call."""
        return sorted({code.line(c) for c in code.all(cst.Call) if widening_in(c) is not None})

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """Drop or move the widening at ``line``."""
        found = _widening_at(code, line)
        if found is None:
            return NotApplicable(f"line {line} holds no widening (x.astype(float32), jnp.asarray(x, dtype=float32))")
        stmt, w = found
        if hint.wide_dtype and w.wide != hint.wide_dtype:
            return NotApplicable(f"the widening at line {line} is to {w.wide}, the finding's to {hint.wide_dtype}")
        value = code.source_of(w.value)
        read = _readers(code, stmt, w)
        if isinstance(read, str):
            return NotApplicable(read, "refused")
        names, readers = read
        other = next((r for r in readers if r.kind == "other"), None)
        if other is not None:
            return NotApplicable(f"the widened {value} is also read at line {other.line} ({other.what})", "refused")
        changes: dict[cst.CSTNode, Change] = {}
        moved: list[str] = []
        for r in readers:
            if r.kind == "jit-other" and r.function is not None and r.function.name.value not in moved:
                move = _move_into(code, r.function, r.param, code.source_of(w.dtype))
                if isinstance(move, str):
                    return NotApplicable(move, "refused")
                changes.update(move)
                moved.append(r.function.name.value)
        drop = self._drop(code, stmt, w, names)
        if drop is None:
            return NotApplicable(f"line {line}: the widening's line cannot be removed on its own", "refused")
        changes.update(drop)
        exact = (hint.narrow_dtype, w.wide) in EXACT
        selecting = any(r.kind in ("selection", "jit-selection") for r in readers)
        safe = not moved and (exact or not selecting)
        if moved:
            what, note = (f"move the widening of {value} into {', '.join(moved)}()",
                          "the jitted function now widens for every caller (unsafe: verify)")
        else:
            what = f"drop the widening of {value} (read only by {'; '.join(dict.fromkeys(r.what for r in readers))})"
            note = "" if safe else (f"the dtype of {value} is not known here: the argmax is unchanged only for an "
                                    f"exact widening (bf16/f16 -> {w.wide}); verify")
        return Plan(SiteEdit(code.line(w.call), what, safe, note), changes)

    def _drop(self, code: Code, stmt: cst.BaseSmallStatement, w: Widening,
              names: list[cst.Name]) -> dict[cst.CSTNode, Change] | None:
        if not names:
            return self._in_place(code, stmt, w)
        assert isinstance(stmt, cst.Assign)
        target = stmt.targets[0].target
        assert isinstance(target, cst.Name)
        if get_full_name_for_node(w.value) == target.value:
            return remove_line(code, stmt, describes=_describes_widening) or self._in_place(code, stmt, w)
        if isinstance(w.value, cst.Name):
            scope = scope_of(code, stmt)
            last = max(code.position(n) for n in names)
            rebound = any(u.kind != "load" and code.end_position(stmt) <= u.position <= last
                          for u in name_uses(code, scope, w.value.value))
            removal = remove_line(code, stmt, describes=_describes_widening)
            if not rebound and removal is not None:
                return {**removal, **{n: cst.Name(w.value.value) for n in names}}
        return self._in_place(code, stmt, w)

    def _in_place(self, code: Code, stmt: cst.BaseSmallStatement, w: Widening) -> dict[cst.CSTNode, Change]:
        """The widening call replaced by its value where it stands; a trailing comment of that line
        that speaks of the widening (``# widen for the sampler``) goes with it."""
        changes: dict[cst.CSTNode, Change] = {w.call: w.value}
        line = code.parent(stmt)
        if isinstance(line, cst.SimpleStatementLine) and line.trailing_whitespace.comment is not None \
                and _describes_widening(line.trailing_whitespace.comment.value):
            newline = line.trailing_whitespace.newline
            changes[line] = lambda node: node.with_changes(trailing_whitespace=cst.TrailingWhitespace(newline=newline))
        return changes


FIX = EagerWidening()
