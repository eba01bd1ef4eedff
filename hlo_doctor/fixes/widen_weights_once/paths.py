"""Where a jitted step widens its weights, and the module-level dict its callers pass.

``params["emb"].T.astype(jnp.float32)`` is a :class:`WeightCast` of parameter ``params`` at path
``("emb",)``. The step's casts and the callers' dict are read from the source as written.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.source.base import NotApplicable
from hlo_doctor.fixes.source.code import Code
from hlo_doctor.fixes.source.flow import name_uses
from hlo_doctor.fixes.source.jit import JitSite, bound_argument, find_jits, jit_calls

__all__ = ["WeightCast", "casts_at", "global_dict", "step_casts"]

_WIDE = frozenset({"float32", "float64"})
_MUTATORS = frozenset({"update", "pop", "setdefault", "clear", "popitem", "__setitem__"})
_LOADED_ELSEWHERE = ("store the parameters in the dtype the program computes with where they are loaded "
                     "(jax.tree.map(lambda w: w.astype(jnp.float32), params)), once")


@dataclass(frozen=True, slots=True)
class WeightCast:
    """``<param>[k1][k2](.T)?.astype(<dtype>)``: the call, the parameter, the keys, the dtype as written."""

    call: cst.Call
    param: str
    path: tuple[str, ...]
    dtype: str
    line: int


def _src(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _receiver(node: cst.BaseExpression) -> cst.BaseExpression:
    """``x`` of ``x.T`` or ``x.transpose()`` (layout changes the step may keep), else ``node``."""
    if isinstance(node, cst.Attribute) and node.attr.value == "T":
        return node.value
    if isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute) and \
            node.func.attr.value == "transpose":
        return node.func.value
    return node


def _path(node: cst.BaseExpression) -> tuple[cst.BaseExpression, tuple[str, ...]]:
    """The root and string keys of ``root["a"]["b"]``."""
    keys: list[str] = []
    while isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
            and isinstance(node.slice[0].slice.value, cst.SimpleString):
        keys.append(str(node.slice[0].slice.value.evaluated_value))
        node = node.value
    return node, tuple(reversed(keys))


def _cast(code: Code, call: cst.Call) -> WeightCast | cst.BaseExpression | None:
    """``call`` as a cast of a name's path to a literal wide dtype; its root when that is not a name."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "astype" and len(call.args) == 1):
        return None
    dtype = call.args[0].value
    name = (get_full_name_for_node(dtype) or "").rsplit(".", 1)[-1] if not isinstance(dtype, cst.SimpleString) \
        else str(dtype.evaluated_value)
    root, keys = _path(_receiver(call.func.value))
    if name not in _WIDE:
        return root if isinstance(root, cst.Attribute) else None
    if isinstance(root, cst.Name):
        return WeightCast(call, root.value, keys, _src(dtype), code.line(call))
    return root


def casts_at(code: Code, line: int) -> list[WeightCast] | NotApplicable:
    """The casts of a function parameter's path at ``line`` (or why the line's widening is not one)."""
    stmt = code.statement_at(line)
    if stmt is None:
        return NotApplicable(f"line {line} holds no statement")
    calls = code.all(cst.Call, under=stmt)
    found = [c for call in calls if isinstance(c := _cast(code, call), WeightCast)]
    fn = code.function_at(line)
    params = {p.name.value for p in (*fn.params.params, *fn.params.posonly_params, *fn.params.kwonly_params)} \
        if fn is not None else set()
    mine = [c for c in found if c.param in params]
    if mine:
        return mine
    roots = [c for call in calls if isinstance(c := _cast(code, call), cst.Attribute)]
    roots += [a.value for call in calls for a in call.args if isinstance(a.value, cst.Attribute)
              and (get_full_name_for_node(call.func) or "").rsplit(".", 1)[-1] in ("asarray", "promote_dtype")
              and not a.value.attr.value.endswith("dtype")]
    if roots:
        return NotApplicable(f"the weight widened at line {line} is {_src(roots[0])}, a module's attribute, not a "
                             f"parameter of a function jitted in this file: {_LOADED_ELSEWHERE}", "refused")
    local = _module_param(code, calls, fn, params)
    if local:
        return NotApplicable(f"the weight widened at line {line} is {local}, not a parameter of a function jitted "
                             f"in this file: {_LOADED_ELSEWHERE}", "refused")
    if found:
        return NotApplicable(f"{found[0].param} (line {line}) is not a parameter of the function it is widened in",
                             "refused")
    return NotApplicable(f"line {line} holds no params[...].astype(float32) of a function's parameter")


def _module_param(code: Code, calls: list[cst.Call], fn: cst.FunctionDef | None, params: set[str]) -> str:
    """``kernel, bound from self.param(...) at line N`` when a name converted on the line (``jnp.asarray(x,
    dtype)``, ``x.astype(...)``) was bound in the function from a module's attribute or parameter."""
    if fn is None:
        return ""
    for call in calls:
        name = (get_full_name_for_node(call.func) or "").rsplit(".", 1)[-1]
        given = [call.func.value] if name == "astype" and isinstance(call.func, cst.Attribute) else \
            [a.value for a in call.args[:1]] if name in ("asarray", "promote_dtype") else []
        for value in given:
            root, _ = _path(_receiver(value))
            if not isinstance(root, cst.Name) or root.value in params:
                continue
            binds = [u for u in name_uses(code, fn, root.value)
                     if u.kind == "store" and u.position < code.position(code.statement_of(call) or call)]
            bound = code.statement_of(binds[-1].node) if binds else None
            if isinstance(bound, cst.Assign) and any(isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name)
                                                     and n.value.value == "self" for n in code.all(cst.Attribute,
                                                                                                  under=bound.value)):
                return f"{root.value}, bound from {' '.join(_src(bound.value).split())[:60]} at line {code.line(bound)}"
    return ""


def step_casts(code: Code, at: list[WeightCast]) -> tuple[JitSite, list[WeightCast]] | str:
    """The jitted function of ``at`` and every cast of the same parameter in it; why not, when its
    parameter is read otherwise (a bf16 entry read as such would turn f32) or it is not jitted here."""
    fn = code.enclosing(at[0].call, cst.FunctionDef)
    assert fn is not None
    sites = find_jits(code, fn)
    if not sites:
        return f"{fn.name.value}() is not jitted in this file: {_LOADED_ELSEWHERE}"
    param = at[0].param
    casts = [c for call in code.all(cst.Call, under=fn) if isinstance(c := _cast(code, call), WeightCast)
             and c.param == param and code.enclosing(call, cst.FunctionDef) is fn]
    by_call = {c.call: c for c in casts}
    for u in name_uses(code, fn, param):
        if u.kind == "store" and isinstance(code.parent(u.node), cst.Param):
            continue
        node: cst.CSTNode = u.node
        while isinstance(code.parent(node), cst.Subscript) and code.parent(node).value is node:  # type: ignore[union-attr]
            node = code.parent(node)  # type: ignore[assignment]
        up = code.parent(node)
        if isinstance(up, cst.Attribute) and up.attr.value in ("T", "transpose"):
            node = code.parent(up) if up.attr.value == "transpose" else up  # type: ignore[assignment]
            up = code.parent(node)
        call = code.parent(up) if isinstance(up, cst.Attribute) and up.attr.value == "astype" else None
        if u.kind != "load" or u.nested or call not in by_call:
            what = code.source_of(code.statement_of(u.node) or u.node).strip()[:80]
            return (f"{param} is {'read' if u.kind == 'load' else 'rebound'} at line {u.line} other than widened "
                    f"({what}): its entries would reach that line in the wide type")
    dtypes = {c.dtype for c in casts}
    if len(dtypes) != 1:
        return f"{param}'s entries are widened to {', '.join(sorted(dtypes))}"
    return sites[0], casts


def global_dict(code: Code, site: JitSite, param: str) -> tuple[str, cst.Assign, list[cst.Name]] | str:
    """The module-level dict every call of ``site`` passes for ``param``, its assignment and the
    arguments; why not, when a call passes something else or the dict changes after it is bound."""
    fn = site.function.name.value
    calls = jit_calls(code, site)
    if calls.other:
        return f"{fn}() is used as a value at line {calls.other[0][0]}: its calls cannot all be read"
    if not calls.calls:
        return f"no call of {fn}() in this file: its callers pass {param}; {_LOADED_ELSEWHERE}"
    args: list[cst.Name] = []
    for c in calls.calls:
        arg = bound_argument(site, c.call, param)
        if not isinstance(arg, cst.Name):
            shown = arg if isinstance(arg, str) else _src(arg) if arg is not None else "nothing"
            return (f"the call at line {code.line(c.call)} passes {shown} for {param}, not a module-level dict: "
                    f"{_LOADED_ELSEWHERE}")
        args.append(arg)
    names = {a.value for a in args}
    if len(names) != 1:
        return f"the calls of {fn}() pass different values for {param}: {', '.join(sorted(names))}"
    name = names.pop()
    uses = name_uses(code, code.module, name)
    stores = [u for u in uses if u.kind != "load"]
    bound = code.statement_of(stores[0].node) if len(stores) == 1 and not stores[0].nested else None
    if not isinstance(bound, cst.Assign) or not isinstance(bound.value, cst.Dict) or \
            code.enclosing(bound, cst.FunctionDef) is not None:
        return f"{name} is not a dict literal bound once at module level, so its entries cannot be widened beside it"
    for u in uses:
        up = code.parent(u.node)
        if isinstance(up, cst.Subscript) and isinstance(code.parent(up), (cst.AssignTarget, cst.Del, cst.AugAssign)) or \
                isinstance(up, cst.Attribute) and up.attr.value in _MUTATORS:
            return f"{name} is changed at line {u.line}: a copy widened once would miss the change"
    return name, bound, args
