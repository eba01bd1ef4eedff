"""``init-once``: run a model's initialiser once, not on every call of an eager ``generate()`` (HD014).

transformers' Flax ``generate()`` calls ``self.init_cache(batch, length)``, which runs ``module.init``
(a random init of every weight and a forward pass) to keep only a zero cache, on every call. The
finding's line is that call; the fix caches the initialiser's result per argument values
(``@functools.cache`` on its ``def``, in this file), so later calls reuse the first call's result.

Unsafe: the result is now one object shared by every call. That is the same as computing it again
when the initialiser is deterministic (no key from its caller, no unseeded randomness, no clock) and
no caller changes or donates what it returns (a donated cache would be deleted for the next call);
the source shows the first, not the second. The instance stays alive in the cache. An argument that
is an array cannot be a cache key (``TypeError`` at the call, not a wrong value). Refused: the
initialiser is not defined in this file, takes a random key or seed, draws from a key that is not a
constant, or sets attributes (its effect would then happen once).
"""

from __future__ import annotations

import re
from typing import ClassVar

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.init_once.examples import INVALID, VALID
from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceExample
from hlo_doctor.fixes.source.code import Change, Code, Codemod, Plan

__all__ = ["FIX", "InitOnce"]

# HD014's initialiser names: init, init_cache, _init_weights, initialize... (not __init__).
_INIT = re.compile(r"^_?init(?:_\w+)?$|^initiali[sz]e\w*$")
_KEY_PARAM = re.compile(r"(^|_)(key|rng|seed|prng)s?($|_)")
_CACHES = frozenset({"functools.cache", "functools.lru_cache", "cache", "lru_cache"})
_NONDETERMINISTIC = ("np.random.", "numpy.random.", "random.", "time.", "os.urandom")
_NOTE = ("the result is shared by every call: the same only while the initialiser is deterministic and no caller "
         "changes or donates what it returns; the instance stays alive in the cache: verify")


def _called(code: Code, line: int) -> tuple[cst.Call, str, bool] | None:
    """The call of an initialiser at ``line``: the call, its name, whether through ``self.``."""
    stmt = code.statement_at(line)
    for call in code.all(cst.Call, under=stmt) if stmt is not None else []:
        f = call.func
        if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self" and \
                _INIT.match(f.attr.value):
            return call, f.attr.value, True
        if isinstance(f, cst.Name) and _INIT.match(f.value):
            return call, f.value, False
    return None


def _definition(code: Code, call: cst.Call, name: str, method: bool) -> cst.FunctionDef | None:
    if method:
        cls = code.enclosing(call, cst.ClassDef)
        classes = [cls] if cls is not None else []
        classes += [c for c in code.all(cst.ClassDef) if c is not cls]  # a base class in the file
        for c in classes:
            body = c.body.body if isinstance(c.body, cst.IndentedBlock) else []
            found = next((f for f in body if isinstance(f, cst.FunctionDef) and f.name.value == name), None)
            if found is not None:
                return found
        return None
    return next((f for f in code.module.body if isinstance(f, cst.FunctionDef) and f.name.value == name), None)


def _impure(code: Code, fn: cst.FunctionDef) -> str:
    """Why ``fn``'s result may differ from call to call, or change something once only ("" when neither)."""
    params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params)]
    keyed = [p for p in params if _KEY_PARAM.search(p)]
    if keyed:
        return f"{fn.name.value}() takes a random key ({keyed[0]}): each call may draw other values"
    for call in code.all(cst.Call, under=fn.body):
        name = get_full_name_for_node(call.func) or ""
        if name.startswith(_NONDETERMINISTIC) and not name.startswith("jax."):
            return f"{fn.name.value}() calls {name} (line {code.line(call)}): not the same on every call"
        if name in ("jax.random.PRNGKey", "jax.random.key") and not (
                call.args and isinstance(call.args[0].value, cst.Integer)):
            return f"{fn.name.value}() draws from a key that is not a constant (line {code.line(call)})"
    for target in code.all(cst.AssignTarget, under=fn.body):
        if isinstance(target.target, cst.Attribute):
            return (f"{fn.name.value}() sets {code.source_of(target.target)} (line {code.line(target)}): cached, it "
                    f"would do that once")
    return ""


class InitOnce(Codemod):
    """Cache an initialiser that an eager step calls every time (module docstring)."""

    fix_id: ClassVar[str] = "init-once"
    title: ClassVar[str] = "run the model's initialiser once, not on every call"
    VALID: ClassVar[tuple[SourceExample, ...]] = VALID
    INVALID: ClassVar[tuple[SourceExample, ...]] = INVALID

    def candidates(self, code: Code) -> list[int]:
        """Every line calling an initialiser outside its own class's constructor."""
        lines = set()
        for call in code.all(cst.Call):
            at = _called(code, code.line(call))
            fn = code.enclosing(call, cst.FunctionDef)
            if at is not None and at[0] is call and (fn is None or fn.name.value != "__init__"):
                lines.add(code.line(call))
        return sorted(lines)

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """Cache the initialiser called at ``line``."""
        found = _called(code, line)
        if found is None:
            return NotApplicable(f"line {line} calls no initialiser (init, init_cache, init_weights, initialize...)")
        call, name, method = found
        fn = _definition(code, call, name, method)
        if fn is None:
            return NotApplicable(f"{name}() is not defined in this file: whether it is the same on every call cannot "
                                 f"be read here", "refused")
        if any((get_full_name_for_node(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "")
               in _CACHES for d in fn.decorators):
            return NotApplicable(f"{name}() is already cached", "already-applied")
        why = _impure(code, fn)
        if why:
            return NotApplicable(why, "refused")
        arrays = [a for a in call.args if isinstance(a.value, cst.Call)
                  and (get_full_name_for_node(a.value.func) or "").startswith(("jnp.", "np.", "jax.", "numpy."))]
        if arrays:
            return NotApplicable(f"the call passes {code.source_of(arrays[0].value).strip()}, an array: not a cache "
                                 f"key", "refused")
        deco = cst.Decorator(decorator=cst.parse_expression("functools.cache"))
        changes: dict[cst.CSTNode, Change] = {
            fn: lambda node: node.with_changes(decorators=[*getattr(node, "decorators", ()), deco])}
        what = f"@functools.cache on {name}() (line {code.line(fn)}): computed once per argument values"
        return Plan(SiteEdit(line, what, False, _NOTE), changes, ("functools",))


FIX = InitOnce()
