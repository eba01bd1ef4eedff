"""``drop-round-trip``: drop a narrowing that is widened straight back (HD007).

``x.astype(jnp.bfloat16).astype(jnp.float32)`` writes two converts for a value that ends in the
type it started in. The finding's line holds the narrowing, chained with the widening on the line
(``h = x.astype(bf16).astype(f32)``), or bound to a name whose every read widens it back
(``h = y.astype(bf16)`` ... ``h.astype(f32)``). The fix drops both converts when the finding says the
value was already in the wide type (HD007 checks that), and keeps only the widening (``x.astype(f32)``,
which JAX drops for an f32 ``x``) without a finding.

Always unsafe: the narrowing rounded the value to bf16/f16, so the outputs stay the same only where
the value already fits in the narrow type (it was widened from it: a bf16 checkpoint loaded as f32);
for any other value they change in their low bits, which may be the rounding the program wanted
(emulating bf16 storage). Refused where the narrow value is read as such (returned, stored,
computed on before it is widened back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.drop_round_trip.examples import INVALID, VALID
from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceExample
from hlo_doctor.fixes.source.code import Change, Code, Codemod, Plan
from hlo_doctor.fixes.source.flow import reads_after

if TYPE_CHECKING:
    from hlo_doctor.core.model import Finding

__all__ = ["FIX", "DropRoundTrip"]

NARROW = {"bfloat16": "bf16", "float16": "f16"}
WIDE = {"float32": "f32", "float64": "f64"}
_NOTE = ("the narrowing rounded the value: outputs are the same only where it already fits in the narrow type "
         "(widened from it); otherwise they change in their low bits, which may be rounding the program wanted: verify")


def _cast(node: cst.BaseExpression, table: dict[str, str]) -> tuple[cst.BaseExpression, str] | None:
    """``(x, hlo dtype)`` when ``node`` is ``x.astype(<dtype in table>)``."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "astype"
            and len(node.args) == 1 and node.args[0].keyword is None):
        return None
    dtype = node.args[0].value
    name = str(dtype.evaluated_value) if isinstance(dtype, cst.SimpleString) else \
        (get_full_name_for_node(dtype) or "").rsplit(".", 1)[-1]
    return (node.func.value, table[name]) if name in table else None


class DropRoundTrip(Codemod):
    """Drop ``.astype(narrow)`` that is widened straight back (module docstring)."""

    fix_id: ClassVar[str] = "drop-round-trip"
    title: ClassVar[str] = "drop a narrowing widened straight back"
    VALID: ClassVar[tuple[SourceExample, ...]] = VALID
    INVALID: ClassVar[tuple[SourceExample, ...]] = INVALID

    def hint(self, finding: Finding) -> Hint:
        """The narrow dtype and the dtype the value starts and ends in (HD007's ``extra``)."""
        extra = dict(finding.extra)
        return Hint(narrow_dtype=str(extra.get("narrow_dtype", "")), wide_dtype=str(extra.get("dtype", "")))

    def candidates(self, code: Code) -> list[int]:
        """Every line holding a narrowing ``astype``."""
        return sorted({code.line(c) for c in code.all(cst.Call) if _cast(c, NARROW) is not None})

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """Drop the round trip whose narrowing is at ``line``."""
        stmt = code.statement_at(line)
        nothing = NotApplicable(f"line {line} holds no x.astype(bfloat16/float16) widened straight back")
        if stmt is None:
            return nothing
        narrows = [c for c in code.all(cst.Call, under=stmt) if _cast(c, NARROW) is not None]
        for call in narrows:
            outer = self._widened_by(code, call)
            if outer is not None:
                return self._chained(code, call, outer, hint)
        for call in narrows:
            if isinstance(stmt, cst.Assign) and stmt.value is call and len(stmt.targets) == 1 and \
                    isinstance(stmt.targets[0].target, cst.Name):
                return self._named(code, stmt, stmt.targets[0].target.value, call, hint)
        if narrows:
            return NotApplicable(f"the narrowed value at line {line} is not widened straight back here", "refused")
        return nothing

    def _widened_by(self, code: Code, call: cst.Call) -> cst.Call | None:
        attr = code.parent(call)
        outer = code.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is call else None
        return outer if isinstance(outer, cst.Call) and outer.func is attr and _cast(outer, WIDE) is not None else None

    def _replacement(self, value: cst.BaseExpression, wide_call: cst.Call, wide: str, hint: Hint) -> cst.BaseExpression:
        """``value`` when the finding says it is in the wide type already, else ``value.astype(<wide>)``."""
        if hint.wide_dtype == wide and hint.narrow_dtype:
            return value.with_changes(lpar=(), rpar=()) if isinstance(value, cst.Name) else value
        assert isinstance(wide_call.func, cst.Attribute)
        return wide_call.with_changes(func=wide_call.func.with_changes(value=value))

    def _chained(self, code: Code, call: cst.Call, outer: cst.Call, hint: Hint) -> Plan | NotApplicable:
        value, narrow = _cast(call, NARROW) or (call, "")
        wide = (_cast(outer, WIDE) or (outer, ""))[1]
        if hint.wide_dtype and hint.wide_dtype != wide:
            return NotApplicable(f"the round trip at line {code.line(call)} ends in {wide}, the finding's in "
                                 f"{hint.wide_dtype}")
        new = self._replacement(value, outer, wide, hint)
        what = f"drop the round trip {narrow} -> {wide}: {code.source_of(new).strip()}"
        return Plan(SiteEdit(code.line(call), what, False, _NOTE), {outer: new})

    def _named(self, code: Code, stmt: cst.Assign, name: str, call: cst.Call, hint: Hint) -> Plan | NotApplicable:
        value, narrow = _cast(call, NARROW) or (call, "")
        reads = reads_after(code, stmt, name)
        if isinstance(reads, str):
            return NotApplicable(reads, "refused")
        widened: list[cst.Call] = []
        for node in reads:
            attr = code.parent(node)
            outer = code.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is node else None
            if not (isinstance(outer, cst.Call) and outer.func is attr and _cast(outer, WIDE) is not None):
                what = code.source_of(code.statement_of(node) or node).strip()
                return NotApplicable(f"{name} is read in {narrow} at line {code.line(node)} ({what}): the narrow value "
                                     f"is used", "refused")
            widened.append(outer)
        wides = {(_cast(w, WIDE) or (w, ""))[1] for w in widened}
        if len(wides) != 1 or (hint.wide_dtype and hint.wide_dtype not in wides):
            return NotApplicable(f"{name} is widened to {', '.join(sorted(wides))}, the finding's value is "
                                 f"{hint.wide_dtype or 'not known'}", "refused")
        wide = wides.pop()
        bound = self._replacement(value, widened[0], wide, hint)
        changes: dict[cst.CSTNode, Change] = {call: bound.with_changes(lpar=(), rpar=())}
        for w in widened:
            changes[w] = cst.Name(name)
        what = (f"{name} = {code.source_of(bound).strip()} (no {narrow}); "
                f"{name}.astype(...) -> {name} at line{'s' if len(widened) > 1 else ''} "
                f"{', '.join(str(code.line(w)) for w in widened)}")
        return Plan(SiteEdit(code.line(stmt), what, False, _NOTE), changes)


FIX = DropRoundTrip()
