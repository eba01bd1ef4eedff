"""Whether a call may donate what it passes: the caller must not read the old array again.

Donation hands the argument's buffers to the program: after the call the caller's array is deleted,
and reading it raises. So a call may donate ``v`` when, in the function that makes the call:

- ``v`` is rebound from the call's own result (``state = step(state)``), or is never read after the
  call (and, in a loop, is bound again before the next iteration passes it);
- no other name holds ``v`` or a part of it that is read after the call (``tokens = state.tokens``);
- ``v`` is not passed twice to the call or read by a nested function or lambda;
- a module-level ``v`` (a global) must be rebound from the call's result (``_state = step(_state)``):
  every later read of the name then reads the new value, so only another name holding the old one can
  read a deleted array: an alias bound in the calling scope before the call, a module-level name bound
  from ``v`` (or that ``v`` was bound from, ``_state = INIT``, and read again), or a name in another
  function held across a call of the calling function. Where the calling function returns a part of
  ``v`` (``return _state[1]``), each of its calls in the file must let go of it before the next call (drop
  it, or read it into a Python value there and then); with no call in the file, or a public global,
  the donation is marked unsafe;
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


def _global_held_elsewhere(code: Code, scope: cst.FunctionDef | cst.Module, name: str,
                           stmt: cst.BaseSmallStatement | None) -> str:
    """Another name, outside the calling scope, that holds the global ``name``'s value across a call
    that donates it and is read after: "" when none (the rebinding statement ``stmt`` is not counted)."""
    caller = scope.name.value if isinstance(scope, cst.FunctionDef) else None
    for assign in code.all(cst.Assign, under=code.module):
        if assign is stmt:
            continue
        where = scope_of(code, assign)
        targets = [n for t in assign.targets for n in assigned_names(t.target)]
        if name in targets:
            # Another binding of the global (``_state = INIT``): a name it is bound from holds the same
            # arrays, unless the value is made by a call (a fresh array, as a temporary is).
            for source in sorted(_held_names(assign.value) - {name}):
                reads = [u for u in name_uses(code, code.module, source) if u.kind == "load"
                         and not code.position(assign) <= u.position < code.end_position(assign)]
                if reads:
                    return (f"{source} (line {code.line(assign)}) holds the arrays {name} is bound from and is read "
                            f"at line {reads[0].line}: donating {name} deletes them")
            continue
        if where is scope or not _reads(code, assign.value, name):
            continue
        for alias in targets:
            loads = [u for u in name_uses(code, where, alias) if u.kind == "load"
                     and u.position >= code.end_position(assign)]
            if isinstance(where, cst.Module):
                # Bound once at import from the value the global had then: every later read is stale.
                if loads:
                    return (f"{alias} (line {code.line(assign)}) holds {name}'s value from before any call and "
                            f"is read at line {loads[0].line}")
                continue
            # In another function: stale only if that function runs the donating call in between.
            runs = [c for c in code.all(cst.Call, under=where) if caller is not None
                    and _callee(c) == caller and code.position(c) > code.position(assign)]
            late = [u for u in loads if runs and u.position > code.position(runs[0])]
            if late:
                return (f"{alias} (line {code.line(assign)}) holds {name} across {caller}() (line "
                        f"{code.line(runs[0])}) and is read after it, at line {late[0].line}")
    return ""


# Reads that turn an array into a Python value (or print it) there and then: nothing keeps the array.
_CONVERTERS = frozenset({"int", "float", "bool", "str", "print", "repr", "len"})
_CONVERTING_METHODS = frozenset({"item", "tolist"})


def _returns_part(code: Code, scope: cst.FunctionDef | cst.Module, name: str) -> int | None:
    """The line of a ``return`` of ``scope`` handing back ``name`` or a part of it."""
    if not isinstance(scope, cst.FunctionDef):
        return None
    for ret in code.all(cst.Return, under=scope):
        if ret.value is not None and scope_of(code, ret) is scope and name in _held_names(ret.value):
            return code.line(ret)
    return None


def _converted_here(code: Code, node: cst.CSTNode) -> bool:
    """Whether the value of ``node`` is read into a Python value (or printed) by the expression around it."""
    parent = code.parent(node)
    if isinstance(parent, cst.Arg):
        outer = code.parent(parent)
        return isinstance(outer, cst.Call) and _callee(outer) in _CONVERTERS and isinstance(outer.func, cst.Name)
    if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _CONVERTING_METHODS:
        return isinstance(code.parent(parent), cst.Call)
    return False


def _callers_drop_parts(code: Code, scope: cst.FunctionDef, name: str, returned: int) -> Verdict:
    """Whether every call in the file of ``scope``'s function lets go of what it returns (a part of the
    state) before the function runs again."""
    fn = scope.name.value
    what = f"{fn}() returns a part of {name} (line {returned}), which its next call donates"
    site = _caller_site(code, scope)
    calls = jit_calls(code, site)
    if not calls.calls:
        return Verdict(True, safe=False, reason=f"{what}; its callers are not in this file: none may keep it "
                                                f"across the next call")
    if calls.other:
        line, use = calls.other[0]
        return Verdict(True, safe=False, reason=f"{what}; {fn} is also used as a value (line {line}: {use}): its "
                                                f"callers cannot all be checked")
    for c in calls.calls:
        call = c.call
        stmt = code.statement_of(call)
        if isinstance(stmt, cst.Expr) and stmt.value is call or _converted_here(code, call):
            continue  # dropped, or read into a Python value there and then
        outer = scope_of(code, call)
        again = any(a is not call and code.position(a.call) > code.position(call) and scope_of(code, a.call) is outer
                    for a in calls.calls)
        repeated = bool(loops_around(code, call, outer)) or any(
            isinstance(a, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp))
            for a in code.ancestors(call) if a is not outer) or again
        bound = (stmt.targets[0].target if isinstance(stmt, cst.Assign) and stmt.value is call
                 and len(stmt.targets) == 1 else None)
        if isinstance(bound, cst.Name):
            loads = [u for u in name_uses(code, outer, bound.value) if u.kind == "load" and not u.nested
                     and u.position > code.position(call)]
            kept = next((u for u in loads if not _converted_here(code, u.node)), None)
            if kept is None:
                continue
            if not repeated:
                continue  # called once here: nothing donates what it holds
            return Verdict(False, reason=f"{what}; line {code.line(call)} binds it to {bound.value}, read at line "
                                         f"{kept.line} while {fn}() runs again")
        if repeated:
            return Verdict(False, reason=f"{what}; line {code.line(call)} keeps it while {fn}() runs again")
        if isinstance(stmt, cst.Return):
            return Verdict(True, safe=False, reason=f"{what}; line {code.line(call)} returns it to callers "
                                                    f"outside this file")
    return Verdict(True)


def _held_names(value: cst.BaseExpression) -> set[str]:
    """The names whose arrays ``value`` hands on as they are: a name, a part of one (an attribute, an
    item), or one inside a tuple, list or dict; a call's or an operation's result is a new array."""
    if isinstance(value, cst.Name):
        return {value.value}
    if isinstance(value, (cst.Attribute, cst.Subscript)):
        return _held_names(value.value)
    if isinstance(value, (cst.Tuple, cst.List)):
        return set().union(*(_held_names(e.value) for e in value.elements))
    if isinstance(value, cst.Dict):
        return set().union(*(_held_names(e.value) for e in value.elements if isinstance(e, cst.DictElement)))
    if isinstance(value, cst.IfExp):
        return _held_names(value.body) | _held_names(value.orelse)
    return set()


def _callee(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
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
        # Rebound from the result: every later read of the name reads the new value; only another name
        # still holding the old one can read a deleted array.
        held = (_aliases_read_after(code, scope, name, call, after)
                or _global_held_elsewhere(code, scope, name, stmt))
        if held:
            return Verdict(False, reason=f"{where}: {held}")
        returned = _returns_part(code, scope, name)
        if returned is not None and isinstance(scope, cst.FunctionDef):
            # What the function returns is a part of the state its next call donates: a caller that
            # keeps it across that call reads a deleted array.
            verdict = _callers_drop_parts(code, scope, name, returned)
            if not verdict.ok or not verdict.safe:
                return verdict
        if not name.startswith("_"):
            return Verdict(True, safe=False, reason=f"{where}: {name} is a public module-level name: code outside "
                                                    f"this file may hold its old value")
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
