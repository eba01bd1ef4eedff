"""What reads a widened value: an argmax, a jitted function that only argmaxes it, or anything else.

A widening written outside ``jit`` (``logits = logits.astype(jnp.float32)``, ``jnp.asarray(x,
jnp.float32)``) compiles a program of its own that writes the wide copy (HD003) for a consumer that
often only selects from it (HD001). What the value's readers are decides the fix:

- every reader is ``jnp.argmax``/``argmin`` of it, or a call of a function jitted in this file whose
  parameter is only read by those: the widening can go (argmax of an exactly widened tensor is the
  argmax of the narrow one);
- a reader is a jitted function that widens the parameter itself first: the widening can go too;
- a reader is a jitted function that reads the parameter otherwise: the widening moves inside it;
- any other reader (the value is returned, stored, computed on eagerly): nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.source.code import Code
from hlo_doctor.fixes.source.flow import name_uses
from hlo_doctor.fixes.source.jit import JitSite, find_jits

__all__ = ["SELECTIONS", "WIDE_NAMES", "Reader", "Widening", "read_by", "widening_in"]

WIDE_NAMES = {
    "float32": "f32", "float64": "f64",
}
SELECTIONS = frozenset({"jnp.argmax", "jnp.argmin", "jax.numpy.argmax", "jax.numpy.argmin"})
_ASARRAY = frozenset({"jnp.asarray", "jnp.array", "jax.numpy.asarray", "jax.numpy.array"})


@dataclass(frozen=True, slots=True)
class Widening:
    """One widening call: the call, the value widened, the dtype expression, its HLO name (``f32``)."""

    call: cst.Call
    value: cst.BaseExpression
    dtype: cst.BaseExpression
    wide: str


def _dtype_name(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.SimpleString):
        return WIDE_NAMES.get(str(node.evaluated_value), "")
    name = get_full_name_for_node(node) or ""
    return WIDE_NAMES.get(name.rsplit(".", 1)[-1], "") if "." in name else ""


def widening_in(call: cst.Call) -> Widening | None:
    """``call`` as a widening (``x.astype(jnp.float32)``, ``jnp.asarray(x, dtype=jnp.float32)``), else None."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "astype" and call.args:
        dtype = call.args[0].value
        wide = _dtype_name(dtype)
        return Widening(call, func.value, dtype, wide) if wide else None
    if (get_full_name_for_node(func) or "") in _ASARRAY and call.args and call.args[0].keyword is None:
        given = [a.value for a in call.args[1:2] if a.keyword is None]
        given += [a.value for a in call.args if a.keyword is not None and a.keyword.value == "dtype"]
        if len(given) == 1 and len(call.args) <= 2:
            wide = _dtype_name(given[0])
            return Widening(call, call.args[0].value, given[0], wide) if wide else None
    return None


ReaderKind = Literal["selection", "jit-selection", "jit-widens", "jit-other", "other"]


@dataclass(frozen=True, slots=True)
class Reader:
    """One reader of the widened value: its kind, line, words; for a jitted function, where to move to."""

    kind: ReaderKind
    line: int
    what: str
    function: cst.FunctionDef | None = None
    param: str = ""


def _jit_index(code: Code) -> dict[tuple[str, str], tuple[cst.FunctionDef, JitSite]]:
    index: dict[tuple[str, str], tuple[cst.FunctionDef, JitSite]] = {}
    for fn in code.all(cst.FunctionDef):
        for site in find_jits(code, fn):
            index.setdefault(site.ref, (fn, site))
    return index


def _is_selection_arg(code: Code, node: cst.CSTNode) -> bool:
    """``jnp.argmax(node, ...)`` (first positional) or ``node.argmax(...)``."""
    parent = code.parent(node)
    if isinstance(parent, cst.Arg) and parent.keyword is None:
        call = code.parent(parent)
        return isinstance(call, cst.Call) and call.args[0] is parent and \
            (get_full_name_for_node(call.func) or "") in SELECTIONS
    if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in ("argmax", "argmin"):
        return isinstance(code.parent(parent), cst.Call)
    return False


def _widened_read(code: Code, node: cst.Name, wide: str) -> cst.Call | None:
    """The call when ``node`` is read as ``node.astype(<wide>)``."""
    attr = code.parent(node)
    call = code.parent(attr) if isinstance(attr, cst.Attribute) else None
    if not isinstance(call, cst.Call) or call.func is not attr:
        return None
    found = widening_in(call)
    return call if found is not None and found.wide == wide else None


def _widens_first(code: Code, fn: cst.FunctionDef, param: str, wide: str) -> bool:
    """``fn`` widens ``param`` to ``wide`` before anything else reads it: its first statement on it is
    ``param = param.astype(<wide>)``, or every read of it is such a widening."""
    uses = [u for u in name_uses(code, fn, param) if not isinstance(code.parent(u.node), cst.Param)]
    loads = [u for u in uses if u.kind == "load"]
    if not loads:
        return False
    # The first statement that touches it (an assignment reads its value before it binds).
    stmt = code.statement_of(uses[0].node)
    if isinstance(stmt, cst.Assign) and isinstance(stmt.value, cst.Call) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0].target, cst.Name) and stmt.targets[0].target.value == param:
        receiver = stmt.value.func.value if isinstance(stmt.value.func, cst.Attribute) else None
        if isinstance(receiver, cst.Name) and _widened_read(code, receiver, wide) is stmt.value:
            return True
    return all(_widened_read(code, u.node, wide) is not None for u in loads)


def _param_of(site: JitSite, call: cst.Call, arg: cst.Arg) -> str:
    if arg.keyword is not None:
        return arg.keyword.value
    if arg.star:
        return ""
    positional = [a for a in call.args if a.keyword is None]
    index = positional.index(arg) + (1 if site.binds_self else 0)
    params = site.positional_params()
    return params[index] if index < len(params) else ""


def read_by(code: Code, node: cst.CSTNode, wide: str) -> Reader:
    """What the expression ``node`` (a widened value, or a name holding it) is read by."""
    line = code.line(node)
    if _is_selection_arg(code, node):
        return Reader("selection", line, "an argmax/argmin")
    parent = code.parent(node)
    call = code.parent(parent) if isinstance(parent, cst.Arg) else None
    if not isinstance(parent, cst.Arg) or not isinstance(call, cst.Call):
        return Reader("other", line, f"{code.source_of(code.statement_of(node) or node).strip()}")
    func = call.func
    ref = ("attr", func.attr.value) if isinstance(func, cst.Attribute) else \
        ("name", func.value) if isinstance(func, cst.Name) else ("", "")
    found = _jit_index(code).get(ref)
    if found is None:
        return Reader("other", line, f"a call of {code.source_of(func)}, which is not jitted in this file")
    fn, site = found
    param = _param_of(site, call, parent)
    if not param or param in site.static():
        return Reader("other", line, f"{code.source_of(func)}(), at an argument that cannot be matched")
    loads = [u for u in name_uses(code, fn, param) if u.kind in ("load", "store") and not
             isinstance(code.parent(u.node), cst.Param)]
    if _widens_first(code, fn, param, wide):
        return Reader("jit-widens", line, f"{fn.name.value}(), which widens {param} itself", fn, param)
    if loads and all(u.kind == "load" and not u.nested and _is_selection_arg(code, u.node) for u in loads):
        return Reader("jit-selection", line, f"{fn.name.value}(), which only argmaxes {param}", fn, param)
    return Reader("jit-other", line, f"{fn.name.value}(), which also computes on {param}", fn, param)
