"""``widen-weights-once``: widen a jitted function's weights once, where they are defined (HD014).

``logits = h @ params["emb"].T.astype(jnp.float32)`` inside a jitted step given bf16 weights widens
the table on every call. When every call of the step in this file passes the same module-level dict
(``decode(PARAMS, x)``, ``PARAMS = {...}`` bound once), the fix adds the widened dict once, after it::

    PARAMS_F32 = {**PARAMS, "emb": PARAMS["emb"].astype(jnp.float32), "w": PARAMS["w"].astype(jnp.float32)}

and the calls pass ``PARAMS_F32``. The step keeps its ``.astype`` (a no-op on an f32 array: JAX
emits no convert), so it stays right for callers elsewhere. Safe: every read of the parameter in
the step is one of the widened entries (through ``.T``/``.transpose()`` at most), so the step
computes on the same values; the convert runs once instead of per call. The f32 copy is held
beside the original (memory). Refused, with the reason: the weight is a module's attribute
(``self.kernel``, flax's ``self.param``) or not a parameter of a function jitted in this file (the
parameters are loaded elsewhere: store them in the compute dtype there), a call passes something
else than a module-level dict bound once, the dict is changed after, or the step reads the
parameter otherwise (a bf16 lookup would turn f32).
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceExample
from hlo_doctor.fixes.source.code import Change, Code, Codemod, Plan, Result
from hlo_doctor.fixes.widen_weights_once.examples import INVALID, VALID
from hlo_doctor.fixes.widen_weights_once.paths import casts_at, global_dict, step_casts

__all__ = ["FIX", "WidenWeightsOnce"]

_SUFFIX = {"float32": "F32", "float64": "F64"}


def _widened(name: str, paths: list[tuple[str, ...]], dtype: str) -> str:
    """``{**G, "a": G["a"].astype(d)}`` for every path (nested dicts for nested paths)."""
    def build(prefix: tuple[str, ...], group: list[tuple[str, ...]]) -> str:
        base = name + "".join(f"[{k!r}]" for k in prefix)
        if any(len(p) == len(prefix) for p in group):
            return f"{base}.astype({dtype})"
        keys = list(dict.fromkeys(p[len(prefix)] for p in group))
        inner = ", ".join(f"{k!r}: {build((*prefix, k), [p for p in group if p[len(prefix)] == k])}" for k in keys)
        return f"{{**{base}, {inner}}}"
    return build((), paths).replace("'", '"')


def _widened_already(value: cst.BaseExpression, paths: list[tuple[str, ...]]) -> bool:
    """``value`` is ``{**G, "a": G["a"].astype(...)}`` for every path: this fix's own copy."""
    for path in paths:
        node: cst.BaseExpression = value
        for key in path:
            if not isinstance(node, cst.Dict) or not any(isinstance(e, cst.StarredDictElement) for e in node.elements):
                return False
            node = next((e.value for e in node.elements if isinstance(e, cst.DictElement)
                         and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == key), cst.Name("_"))
        if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "astype"):
            return False
    return True


class WidenWeightsOnce(Codemod):
    """Widen a jitted step's weights once, after the dict the callers pass is defined (module docstring)."""

    fix_id: ClassVar[str] = "widen-weights-once"
    title: ClassVar[str] = "widen a jitted function's weights once, not on every call"
    VALID: ClassVar[tuple[SourceExample, ...]] = VALID
    INVALID: ClassVar[tuple[SourceExample, ...]] = INVALID

    def candidates(self, code: Code) -> list[int]:
        """Every line holding a widening ``astype``."""
        return sorted({code.line(c) for c in code.all(cst.Call)
                       if isinstance(c.func, cst.Attribute) and c.func.attr.value == "astype"})

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """Widen once the weights of the jitted function whose widening is at ``line``."""
        at = casts_at(code, line)
        if isinstance(at, NotApplicable):
            return at
        found = step_casts(code, at)
        if isinstance(found, str):
            return NotApplicable(found, "refused")
        site, casts = found
        source = global_dict(code, site, casts[0].param)
        if isinstance(source, str):
            return NotApplicable(source, "refused")
        name, stmt, calls = source
        if _widened_already(stmt.value, [c.path for c in casts]):
            return NotApplicable(f"{name} (line {code.line(stmt)}) already holds the widened entries", "already-applied")
        dtype = casts[0].dtype
        suffix = _SUFFIX.get(dtype.strip("\"'").rsplit(".", 1)[-1], "WIDE")
        new_name = f"{name}_{suffix}"
        if any(isinstance(n, cst.Name) and n.value == new_name for n in code.all(cst.Name)):
            return NotApplicable(f"{new_name} is already a name in this file", "already-applied")
        paths = list(dict.fromkeys(c.path for c in casts))
        line_node = code.parent(stmt)
        assert isinstance(line_node, cst.SimpleStatementLine)
        added = cst.parse_statement(f"{new_name} = {_widened(name, paths, dtype)}\n")

        def after(node: cst.CSTNode) -> Result:
            assert isinstance(node, cst.SimpleStatementLine)
            return cst.FlattenSentinel([node, added])
        changes: dict[cst.CSTNode, Change] = {line_node: after}
        for arg in calls:
            changes[arg] = cst.Name(new_name)
        shown = ", ".join(casts[0].param + "".join(f"[{k!r}]" for k in p) for p in paths)
        what = (f"{new_name} = {name} with {shown} widened to {dtype} once (line {code.line(stmt)}); "
                f"{len(calls)} call{'s' if len(calls) != 1 else ''} of {site.function.name.value}() pass it")
        return Plan(SiteEdit(at[0].line, what, True, "the wide copy is held beside the original weights"), changes)


FIX = WidenWeightsOnce()
