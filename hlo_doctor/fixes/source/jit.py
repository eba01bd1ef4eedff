"""Where a function is wrapped by ``jax.jit`` in a file, how it is called there, and how to add options.

Three spellings of the wrapper are recognised, as JAX code writes them:

- a decorator: ``@jax.jit``, ``@jax.jit(static_argnames=...)``, ``@partial(jax.jit, ...)`` or
  ``@functools.partial(jax.jit, ...)``;
- a call: ``step = jax.jit(_step, ...)``, ``self._fn = jax.jit(self._impl, ...)``;

``jit`` imported from jax and ``partial`` imported from functools count, under any alias. The calls
of the wrapped function are found by name (``step(...)``) or attribute (``self._fn(...)``), through
local aliases (``fn = self._a if stream else self._b``); any other use of it (passed as a value,
stored) is reported, since its calls cannot then be followed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.source.code import Code
from hlo_doctor.fixes.source.flow import assigned_names, name_uses, scope_of

__all__ = ["CallSite", "JitSite", "bound_argument", "find_jits", "jit_calls", "jit_names", "keyword_value"]


@dataclass(frozen=True, slots=True)
class JitNames:
    """How this file spells ``jax.jit`` and ``functools.partial``."""

    jit: frozenset[str]
    partial: frozenset[str]


def jit_names(code: Code) -> JitNames:
    """The dotted names that mean ``jax.jit`` and ``functools.partial`` in this file."""
    jit, partial = {"jax.jit"}, {"functools.partial"}
    for imp in code.all(cst.Import):
        for alias in imp.names:
            name = get_full_name_for_node(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                if name == "jax":
                    jit.add(f"{alias.asname.name.value}.jit")
                if name == "functools":
                    partial.add(f"{alias.asname.name.value}.partial")
    for frm in code.all(cst.ImportFrom):
        module = get_full_name_for_node(frm.module) if frm.module is not None else ""
        if isinstance(frm.names, cst.ImportStar):
            continue
        for alias in frm.names:
            bound = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) \
                else get_full_name_for_node(alias.name)
            if module == "jax" and get_full_name_for_node(alias.name) == "jit" and bound:
                jit.add(bound)
            if module == "functools" and get_full_name_for_node(alias.name) == "partial" and bound:
                partial.add(bound)
    return JitNames(frozenset(jit), frozenset(partial))


def _dotted(node: cst.BaseExpression) -> str:
    return get_full_name_for_node(node) or ""


@dataclass
class JitSite:
    """One ``jax.jit`` of a function in the file.

    ``call``: the call whose keywords hold the jit's options (``jax.jit(f, ...)``,
    ``partial(jax.jit, ...)``, ``jax.jit(...)`` as a decorator), or None for a bare ``@jax.jit``
    (``decorator`` then); ``ref``: how the wrapped function is called (``("name", "step")`` or
    ``("attr", "_fn")``); ``binds_self``: its calls pass the instance first (a method).
    """

    function: cst.FunctionDef
    call: cst.Call | None
    decorator: cst.Decorator | None
    ref: tuple[str, str]
    binds_self: bool
    line: int
    owner: cst.CSTNode | None = None  # the assignment holding a jit call

    def positional_params(self) -> list[str]:
        """The wrapped function's positional parameter names, in order (``self`` included)."""
        p = self.function.params
        return [q.name.value for q in (*p.posonly_params, *p.params)]

    def keyword_only(self) -> list[str]:
        """Its keyword-only parameter names."""
        return [q.name.value for q in self.function.params.kwonly_params]

    def _names(self, key_names: str, key_nums: str, offset: int) -> set[str]:
        out: set[str] = set()
        if self.call is None:
            return out
        names = keyword_value(self.call, key_names)
        if names is not None:
            out |= set(_strings(names))
        nums = keyword_value(self.call, key_nums)
        if nums is not None:
            positional = self.positional_params()[offset:]
            out |= {positional[i] for i in _ints(nums) if 0 <= i < len(positional)}
        return out

    @property
    def _offset(self) -> int:
        # jax.jit(self._impl): a bound method, its argnums count after self.
        return 1 if self.binds_self and self.decorator is None and self.owner is not None else 0

    def static(self) -> set[str]:
        """The parameters jit treats as static."""
        return self._names("static_argnames", "static_argnums", self._offset)

    def donated(self) -> set[str]:
        """The parameters already donated."""
        return self._names("donate_argnames", "donate_argnums", self._offset)

    def argnum(self, name: str) -> int | None:
        """``name``'s position as jit counts it (None for a keyword-only parameter)."""
        positional = self.positional_params()[self._offset:]
        return positional.index(name) if name in positional else None


def keyword_value(call: cst.Call, keyword: str) -> cst.BaseExpression | None:
    """The value of ``keyword=`` in ``call``, or None."""
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == keyword), None)


def _strings(node: cst.BaseExpression) -> list[str]:
    if isinstance(node, cst.SimpleString):
        return [str(node.evaluated_value)]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [s for e in node.elements for s in _strings(e.value)]
    return []


def _ints(node: cst.BaseExpression) -> list[int]:
    if isinstance(node, cst.Integer):
        return [int(node.value)]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [i for e in node.elements for i in _ints(e.value)]
    return []


def _in_class(code: Code, fn: cst.FunctionDef) -> bool:
    parent = code.parent(fn)
    parent = code.parent(parent) if isinstance(parent, cst.IndentedBlock) else parent
    return isinstance(parent, cst.ClassDef) and not any(
        _dotted(d.decorator) in ("staticmethod", "classmethod") for d in fn.decorators)


def find_jits(code: Code, fn: cst.FunctionDef) -> list[JitSite]:
    """Every ``jax.jit`` of ``fn`` in the file."""
    names = jit_names(code)
    method = _in_class(code, fn)
    ref = ("attr", fn.name.value) if method else ("name", fn.name.value)
    sites: list[JitSite] = []
    for deco in fn.decorators:
        d = deco.decorator
        if _dotted(d) in names.jit:
            sites.append(JitSite(fn, None, deco, ref, method, code.line(deco)))
        elif isinstance(d, cst.Call) and _dotted(d.func) in names.jit:
            sites.append(JitSite(fn, d, deco, ref, method, code.line(deco)))
        elif isinstance(d, cst.Call) and _dotted(d.func) in names.partial and d.args and \
                _dotted(d.args[0].value) in names.jit:
            sites.append(JitSite(fn, d, deco, ref, method, code.line(deco)))
    for call in code.all(cst.Call):
        if _dotted(call.func) not in names.jit or not call.args or call.args[0].keyword is not None:
            continue
        wrapped = call.args[0].value
        if method:
            hit = isinstance(wrapped, cst.Attribute) and wrapped.attr.value == fn.name.value
        else:
            hit = isinstance(wrapped, cst.Name) and wrapped.value == fn.name.value
        if not hit:
            continue
        assign = code.parent(call)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            target = assign.targets[0].target
            if isinstance(target, cst.Name):
                sites.append(JitSite(fn, call, None, ("name", target.value), False, code.line(call), assign))
                continue
            if isinstance(target, cst.Attribute):
                sites.append(JitSite(fn, call, None, ("attr", target.attr.value), method, code.line(call), assign))
                continue
        sites.append(JitSite(fn, call, None, ("inline", ""), False, code.line(call)))
    return sites


@dataclass
class CallSite:
    """A call of the jitted function: the call, the function it runs in, how it was reached."""

    call: cst.Call
    via: str = ""  # the alias it was called through ("" when direct)


@dataclass
class Calls:
    """The calls of a jitted function in the file, and the uses that are not calls."""

    calls: list[CallSite] = field(default_factory=list)
    other: list[tuple[int, str]] = field(default_factory=list)  # (line, what) of uses that are not calls


def _references(code: Code, site: JitSite) -> list[cst.CSTNode]:
    kind, name = site.ref
    if kind == "name":
        found: list[cst.CSTNode] = [u.node for u in name_uses(code, code.module, name) if u.kind == "load"]
        return found
    if kind == "attr":
        return [a for a in code.all(cst.Attribute) if a.attr.value == name]
    return []


def jit_calls(code: Code, site: JitSite) -> Calls:
    """The calls of ``site``'s jitted function in the file (see the module docstring)."""
    out = Calls()
    if site.ref[0] == "inline" and site.call is not None:
        parent = code.parent(site.call)
        if isinstance(parent, cst.Call) and parent.func is site.call:
            out.calls.append(CallSite(parent))
        else:
            out.other.append((site.line, "the jitted function is used as a value"))
        return out
    for ref in _references(code, site):
        if site.decorator is not None and any(a is site.decorator for a in code.ancestors(ref)):
            continue
        parent = code.parent(ref)
        if isinstance(parent, cst.Call) and parent.func is ref:
            out.calls.append(CallSite(parent))
            continue
        if isinstance(parent, cst.AssignTarget):
            continue  # `self._fn = jax.jit(...)`: the binding itself
        alias = _alias_of(code, ref)
        if alias is not None:
            scope, name = alias
            for use in name_uses(code, scope, name):
                up = code.parent(use.node)
                if use.kind == "load" and isinstance(up, cst.Call) and up.func is use.node:
                    out.calls.append(CallSite(up, via=name))
                elif use.kind == "load":
                    out.other.append((use.line, f"{name} (an alias of it) is used as a value"))
            continue
        out.other.append((code.line(ref), f"{code.source_of(ref)} is used as a value, not called"))
    return out


def _alias_of(code: Code, ref: cst.CSTNode) -> tuple[cst.FunctionDef | cst.Module, str] | None:
    """``(scope, name)`` when ``ref`` is bound to a local name (``fn = ref`` or ``fn = a if c else ref``)."""
    node: cst.CSTNode | None = code.parent(ref)
    while isinstance(node, cst.IfExp):
        node = code.parent(node)
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        names = assigned_names(node.targets[0].target)
        if len(names) == 1 and isinstance(node.targets[0].target, cst.Name):
            return scope_of(code, node), names[0]
    return None


def bound_argument(site: JitSite, call: cst.Call, param: str) -> cst.BaseExpression | None | str:
    """The expression ``call`` passes for ``param``; None when it passes none; a reason (str) when
    the call cannot be read (``*args``/``**kwargs``)."""
    for a in call.args:
        if a.star:
            return f"the call passes {a.star}{'args' if a.star == '*' else 'kwargs'}: its arguments cannot be matched"
        if a.keyword is not None and a.keyword.value == param:
            return a.value
    positional = [a for a in call.args if a.keyword is None]
    params = site.positional_params()
    offset = 1 if site.binds_self else 0
    if param in params:
        index = params.index(param) - offset
        if 0 <= index < len(positional):
            return positional[index].value
    return None
