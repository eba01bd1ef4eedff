"""``argmax-without-softmax``: select on the logits, not on a monotone map of them (HD011).

``argmax(softmax(x / T)) == argmax(x)``: a softmax, log-softmax, exp, tanh soft cap or positive scale
computed only for an argmax, argmin or top-k (whose values are not read) is work the selection does
not need. The finding's line holds the map (``probs = jax.nn.softmax(logits / t, axis=-1)``) or the
selection reading it inline (``jnp.argmax(jax.nn.softmax(x), -1)``); the fix makes the selection read
what the maps were applied to and drops the map's line when nothing else reads it.

Refused where the map's values are read by anything but selections (probabilities returned,
sampled from, logged), where the argmax runs over the flattened array or another axis than the
softmax's, and where a scale is written negative. Always unsafe: rounding in the map can make two
nearly equal values equal and so change which index the selection returns first, and a
temperature the source does not show is assumed positive; ``verify`` checks the outputs.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from hlo_doctor.fixes.argmax_without_softmax.examples import INVALID, VALID
from hlo_doctor.fixes.argmax_without_softmax.maps import Peeled, Selection, describe, peel, selection_of
from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceExample
from hlo_doctor.fixes.source.code import Change, Code, Codemod, Plan, remove_line
from hlo_doctor.fixes.source.flow import name_uses, reads_after, scope_of

__all__ = ["FIX", "ArgmaxWithoutSoftmax"]

_NOTE = ("rounding in the map can make nearly equal values equal and change which index is selected first; a "
         "temperature or scale the source does not show is taken as positive: verify")


def _axis_problem(peeled: Peeled, sel: Selection) -> str:
    if not peeled.row_axes:
        return ""
    row = next(m for m in peeled.maps if "softmax" in m)
    if sel.axis == "None":
        return f"the {sel.kind} runs over the flattened array, and {row} normalises each row apart"
    wrong = [a for a in peeled.row_axes if a != sel.axis]
    return f"{row} runs over axis {wrong[0]}, the {sel.kind} over axis {sel.axis}" if wrong else ""


def _mapped(peeled: Peeled) -> bool:
    """A map to remove (a float astype alone is eager-widening's, not this fix's)."""
    return any(m != "astype" for m in peeled.maps) or bool(peeled.refusal)


def _bound_map(code: Code, stmt: cst.BaseSmallStatement) -> tuple[str, Peeled] | None:
    if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name):
        peeled = peel(stmt.value)
        if _mapped(peeled):
            return stmt.targets[0].target.value, peeled
    return None


def _stable(code: Code, scope: cst.CSTNode, inner: cst.BaseExpression, start: tuple[int, int],
            end: tuple[int, int]) -> str:
    """A name of ``inner`` rebound between ``start`` and ``end`` (then ``inner`` cannot move), or ""."""
    assert isinstance(scope, (cst.FunctionDef, cst.Module))
    for n in code.all(cst.Name, under=inner):
        for u in name_uses(code, scope, n.value):
            if u.kind != "load" and start <= u.position <= end:
                return n.value
    return ""


class ArgmaxWithoutSoftmax(Codemod):
    """Make a selection read the logits instead of a monotone map of them (module docstring)."""

    fix_id: ClassVar[str] = "argmax-without-softmax"
    title: ClassVar[str] = "select on the logits, not on a monotone map of them"
    VALID: ClassVar[tuple[SourceExample, ...]] = VALID
    INVALID: ClassVar[tuple[SourceExample, ...]] = INVALID

    def candidates(self, code: Code) -> list[int]:
        """Every line holding a map bound to a name, or a selection of a map."""
        lines = set()
        for line in code.all(cst.SimpleStatementLine):
            for stmt in line.body:
                if _bound_map(code, stmt) is not None or self._inline(code, stmt):
                    lines.add(code.line(stmt))
        return sorted(lines)

    def _inline(self, code: Code, stmt: cst.BaseSmallStatement) -> list[tuple[Selection, Peeled]]:
        found = []
        for call in code.all(cst.Call, under=stmt):
            for arg in call.args[:1]:
                sel = selection_of(code, arg.value)
                if isinstance(sel, Selection):
                    peeled = peel(sel.arg)
                    if _mapped(peeled):
                        found.append((sel, peeled))
            if isinstance(call.func, cst.Attribute):
                sel = selection_of(code, call.func.value)
                if isinstance(sel, Selection) and sel.call is call:
                    peeled = peel(sel.arg)
                    if _mapped(peeled):
                        found.append((sel, peeled))
        return found

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """The selection at (or reading the map of) ``line`` reads the logits instead."""
        stmt = code.statement_at(line)
        nothing = NotApplicable(f"line {line} holds no softmax, log_softmax, exp, tanh or scale read by an argmax, "
                                f"argmin or top_k")
        if stmt is None:
            return nothing
        bound = _bound_map(code, stmt)
        if bound is not None:
            return self._named(code, stmt, *bound)
        if isinstance(stmt, cst.Return) and stmt.value is not None and _mapped(peel(stmt.value)):
            return NotApplicable(f"line {line} returns the values of the map ({describe(peel(stmt.value))}): its "
                                 f"callers may read them, not only select from them", "refused")
        inline = self._inline(code, stmt)
        if inline:
            sel, peeled = inline[0]
            if peeled.refusal:
                return NotApplicable(peeled.refusal, "refused")
            problem = _axis_problem(peeled, sel)
            if problem:
                return NotApplicable(problem, "refused")
            what = f"{sel.kind} of {code.source_of(peeled.inner)}, not of its {describe(peeled)}"
            return Plan(SiteEdit(code.line(sel.call), what, False, _NOTE), {sel.arg: peeled.inner})
        # The selection's line, reading a name a map was bound to earlier.
        scope = scope_of(code, stmt)
        for call in code.all(cst.Call, under=stmt):
            for arg in call.args[:1]:
                if isinstance(arg.value, cst.Name) and isinstance(selection_of(code, arg.value), Selection):
                    earlier = [u for u in name_uses(code, scope, arg.value.value)
                               if u.kind == "store" and not u.nested and u.position < code.position(stmt)]
                    bound_at = code.statement_of(earlier[-1].node) if earlier else None
                    if bound_at is not None and (b := _bound_map(code, bound_at)) is not None:
                        return self._named(code, bound_at, *b)
        for call in code.all(cst.Call, under=stmt):
            if call.args and call.args[0].keyword is None:
                values_read = selection_of(code, call.args[0].value)
                if isinstance(values_read, str) and _mapped(peel(call.args[0].value)):
                    return NotApplicable(values_read, "refused")
        return nothing

    def _named(self, code: Code, stmt: cst.BaseSmallStatement, name: str, peeled: Peeled) -> Plan | NotApplicable:
        if peeled.refusal:
            return NotApplicable(peeled.refusal, "refused")
        scope = scope_of(code, stmt)
        after = code.end_position(stmt)
        readers = reads_after(code, stmt, name)
        if isinstance(readers, str):
            return NotApplicable(readers, "refused")
        sels = []
        for r in readers:
            sel = selection_of(code, r)
            if isinstance(sel, str):
                return NotApplicable(sel, "refused")
            if sel is None:
                what = code.source_of(code.statement_of(r) or r).strip()
                return NotApplicable(f"{name} is also read at line {code.line(r)} ({what}): the values of the map "
                                     f"({describe(peeled)}) are used, not only selected from", "refused")
            problem = _axis_problem(peeled, sel)
            if problem:
                return NotApplicable(f"{problem} (line {code.line(sel.call)})", "refused")
            sels.append(sel)
        moved = _stable(code, scope, peeled.inner, after, max(code.position(r) for r in readers))
        if moved:
            return NotApplicable(f"{moved} is rebound between the map (line {code.line(stmt)}) and the selection",
                                 "refused")
        changes: dict[cst.CSTNode, Change] = dict(remove_line(code, stmt) or {stmt: stmt})
        if stmt in changes and changes[stmt] is stmt:
            return NotApplicable(f"line {code.line(stmt)}: the map's line cannot be removed on its own", "refused")
        for r in readers:
            changes[r] = peeled.inner
        kinds = "/".join(dict.fromkeys(s.kind for s in sels))
        what = f"{kinds} of {code.source_of(peeled.inner)}; drop {name} = its {describe(peeled)}"
        return Plan(SiteEdit(code.line(stmt), what, False, _NOTE), changes)


FIX = ArgmaxWithoutSoftmax()
