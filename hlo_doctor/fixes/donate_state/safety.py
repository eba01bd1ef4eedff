"""Whether a call may donate what it passes: the caller must not read the old array again.

Donation hands the argument's buffers to the program: after the call the caller's array is deleted,
and reading it raises. So a call may donate ``v`` when, in the function that makes the call:

- ``v`` is rebound from the call's own result (``state = step(state)``), or is never read after the
  call (and, in a loop, is bound again before the next iteration passes it);
- no other name holds ``v`` or a part of it that is read after the call (``tokens = state.tokens``);
- ``v`` is not passed twice to the call, read by a nested function or lambda, or a module-level
  name (a global that other calls read again);
- where ``v`` is a parameter of that function (or rebound from itself, ``v = convert(v)``, which
  may hand back the same array), the same holds, one level up, for every call of the function in
  the file; with no such call in the file the value comes from outside it, and the
  donation is marked unsafe (a caller there could still read it).

Everything is read from the source, conservatively (see :mod:`hlo_doctor.fixes.source.flow`).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from hlo_doctor.fixes.source.code import Code
from hlo_doctor.fixes.source.flow import (
    Use,
    assigned_names,
    first_use_after,
    loops_around,
    name_uses,
    scope_of,
)
from hlo_doctor.fixes.source.jit import JitSite, bound_argument, jit_calls

__all__ = ["Verdict", "check_call"]

# How many levels of "the argument is a parameter of the caller" are followed up the file.
MAX_DEPTH = 3


@dataclass(frozen=True, slots=True)
class Verdict:
    """``ok``: the call may donate; ``safe``: nothing outside the file can still read the array;
    ``reason``: why not (refused) or what is assumed (unsafe)."""

    ok: bool
    safe: bool = True
    reason: str = ""


def _statement(code: Code, node: cst.CSTNode) -> cst.BaseSmallStatement | None:
    return code.statement_of(node)


def _rebinds(stmt: cst.BaseSmallStatement | None, name: str) -> bool:
    if isinstance(stmt, cst.Assign):
        return any(name in assigned_names(t.target) for t in stmt.targets)
    if isinstance(stmt, cst.AnnAssign):
        return name in assigned_names(stmt.target)
    return False


def _is_global(code: Code, scope: cst.FunctionDef | cst.Module, name: str, uses: list[Use]) -> bool:
    if isinstance(scope, cst.Module):
        return True
    declared = any(name in [n.name.value for n in g.names] for g in code.all(cst.Global, under=scope))
    bound_here = any(u.kind == "store" and not u.nested for u in uses)
    return declared or not bound_here


def _fn_name(scope: cst.FunctionDef | cst.Module) -> str:
    return f"{scope.name.value}()" if isinstance(scope, cst.FunctionDef) else "the module"


def _aliases_read_after(code: Code, scope: cst.FunctionDef | cst.Module, name: str, call: cst.Call,
                        after: tuple[int, int]) -> str:
    """A name bound, before the call, from an expression reading ``name`` and read after the call."""
    stmt = _statement(code, call)
    start = code.position(stmt if stmt is not None else call)
    for assign in code.all(cst.Assign, under=scope):
        if code.position(assign) >= start or scope_of(code, assign) is not scope:
            continue
        if not _reads(code, assign.value, name):
            continue
        for target in assign.targets:
            for alias in assigned_names(target.target):
                if alias == name:
                    continue
                nxt = first_use_after(name_uses(code, scope, alias), after)
                if nxt is not None and nxt.kind == "load":
                    return (f"{alias} (line {code.line(assign)}) holds {name} or a part of it and is read after the "
                            f"call, at line {nxt.line}")
    return ""


def _reads(code: Code, node: cst.CSTNode, name: str) -> bool:
    """Whether ``node`` reads the variable ``name`` (not an attribute or a keyword of that name)."""
    for n in code.all(cst.Name, under=node):
        parent = code.parent(n)
        if n.value != name or (isinstance(parent, cst.Attribute) and parent.attr is n):
            continue
        if isinstance(parent, cst.Arg) and parent.keyword is n:
            continue
        return True
    return False


def _caller_site(code: Code, fn: cst.FunctionDef) -> JitSite:
    """The calls of a plain function, found the way a jitted one's are."""
    parent = code.parent(fn)
    owner = code.parent(parent) if isinstance(parent, cst.IndentedBlock) else parent
    method = isinstance(owner, cst.ClassDef)
    ref = ("attr", fn.name.value) if method else ("name", fn.name.value)
    return JitSite(fn, None, None, ref, method, code.line(fn))


def check_call(code: Code, site: JitSite, call: cst.Call, param: str, depth: int = 0) -> Verdict:
    """Whether ``call`` (of ``site``'s function) may donate ``param`` (see the module docstring)."""
    expr = bound_argument(site, call, param)
    where = f"line {code.line(call)}"
    if isinstance(expr, str):
        return Verdict(False, reason=f"{where}: {expr}")
    if expr is None:
        return Verdict(False, reason=f"{where}: the call passes nothing for {param} (its default would be donated)")
    stmt = _statement(code, call)
    if isinstance(expr, cst.Attribute):
        text = code.source_of(expr)
        rebound = isinstance(stmt, cst.Assign) and any(code.source_of(t.target) == text for t in stmt.targets)
        if not rebound:
            return Verdict(False, reason=f"{where}: {text} is an attribute the call does not rebind; other code "
                                         f"may read it after the call")
        return Verdict(True, safe=False, reason=f"{where}: {text} is rebound from the result; other references to "
                                                f"the old array cannot be checked")
    if not isinstance(expr, cst.Name):
        if isinstance(expr, (cst.Call, cst.BinaryOperation)):
            return Verdict(True)  # a temporary: nothing else holds it
        return Verdict(False, reason=f"{where}: {code.source_of(expr)} may be held elsewhere (a container or a view)")
    name = expr.value
    scope = scope_of(code, call)
    uses = name_uses(code, scope, name)
    nested = next((u for u in uses if u.nested and u.kind == "load"), None)
    if nested is not None:
        return Verdict(False, reason=f"{name} is read by a nested function or lambda at line {nested.line}")
    span = (code.position(call), code.end_position(call))
    twice = [u for u in uses if u.kind == "load" and u.node is not expr and span[0] <= u.position < span[1]]
    if twice:
        return Verdict(False, reason=f"{where}: {name} is passed to the call more than once (aliased)")
    rebound = _rebinds(stmt, name)
    after = code.end_position(stmt if stmt is not None else call)
    if _is_global(code, scope, name, uses):
        readers = sorted({u.line for u in name_uses(code, code.module, name) if u.kind == "load"
                          and u.node is not expr})
        if not rebound:
            return Verdict(False, reason=f"{where}: {name} is a module-level name that {_fn_name(scope)} does not "
                                         f"rebind: donating deletes it for every later read"
                                         + (f" (read at line {', '.join(map(str, readers))})" if readers else ""))
        if readers:
            return Verdict(False, reason=f"{where}: {name} is a global read elsewhere, at line "
                                         f"{', '.join(map(str, readers))}")
        return Verdict(True)
    if not rebound:
        nxt = first_use_after(uses, after)
        if nxt is not None and nxt.kind == "load":
            return Verdict(False, reason=f"{name} is read after the call ({where}), at line {nxt.line}")
        for loop in loops_around(code, call, scope):
            again = first_use_after(uses, after, until=code.end_position(loop))
            if again is None or again.kind != "store":
                return Verdict(False, reason=f"{where}: the call runs in a loop (line {code.line(loop)}) and passes "
                                             f"{name} again on the next iteration without rebinding it")
    alias = _aliases_read_after(code, scope, name, call, after)
    if alias:
        return Verdict(False, reason=alias)
    return _origin(code, scope, name, uses, call, depth)


def _origin(code: Code, scope: cst.FunctionDef | cst.Module, name: str, uses: list[Use], call: cst.Call,
            depth: int) -> Verdict:
    """Follow a parameter of the calling function to that function's own callers in the file."""
    if not isinstance(scope, cst.FunctionDef):
        return Verdict(True)
    stmt = _statement(code, call)
    start = code.position(stmt if stmt is not None else call)
    stores = [u for u in uses if u.kind == "store" and not u.nested and u.position < start]
    # Back over rebindings from itself (`x = convert(x)`): a call may hand back its own argument.
    i = len(stores) - 1
    while i >= 0 and not isinstance(code.parent(stores[i].node), cst.Param):
        bound = code.statement_of(stores[i].node)
        value = bound.value if isinstance(bound, (cst.Assign, cst.AnnAssign)) else None
        if value is None or not _reads(code, value, name):
            return Verdict(True)  # a value made here: nothing outside holds it
        i -= 1
    if i < 0:
        return Verdict(True)
    outer = _caller_site(code, scope)
    calls = jit_calls(code, outer)
    if not calls.calls or depth >= MAX_DEPTH:
        return Verdict(True, safe=False, reason=f"{name} is a parameter of {scope.name.value}(), whose callers are "
                                                f"not in this file: donation deletes the array they pass, so none "
                                                f"may read it after {scope.name.value}() returns")
    if calls.other:
        line, what = calls.other[0]
        return Verdict(True, safe=False, reason=f"{name} is a parameter of {scope.name.value}(), which is also used "
                                                f"as a value (line {line}: {what}): its callers cannot all be checked")
    safe, notes = True, []
    for site in calls.calls:
        verdict = check_call(code, outer, site.call, name, depth + 1)
        if not verdict.ok:
            return Verdict(False, reason=f"{name} comes from {scope.name.value}()'s caller: {verdict.reason}")
        safe = safe and verdict.safe
        if verdict.reason:
            notes.append(verdict.reason)
    return Verdict(True, safe=safe, reason="; ".join(notes))
