"""``donate-state``: donate the argument a jitted call rebinds from its result (HD009, HD002).

A decode loop's state (KV caches, positions) handed to a jitted ``while_loop`` without donation is
copied by XLA on every call (HD009). When every caller in the file rebinds the argument from the
result (``state = loop(state)``) or never reads it again, ``donate_argnames`` lets the program update
the caller's buffers in place: the values computed are the same, and the copies go.

The finding's line is inside the jitted function (the loop), at a call of it, or at its ``jax.jit``.
The argument is the one the copied HLO parameter belongs to (its ``op_name``, ``state.cache[0]``);
without a finding, every argument that all calls rebind from the result. The checks on the callers
are in :mod:`.safety`, the edit of the jit in :mod:`.edit`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from hlo_doctor.fixes.donate_state.edit import donation_change
from hlo_doctor.fixes.donate_state.examples import INVALID, VALID
from hlo_doctor.fixes.donate_state.safety import Verdict, check_call
from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceExample
from hlo_doctor.fixes.source.code import Change, Code, Codemod, Plan
from hlo_doctor.fixes.source.flow import assigned_names
from hlo_doctor.fixes.source.jit import JitSite, bound_argument, find_jits, jit_calls

if TYPE_CHECKING:
    from hlo_doctor.core.model import Finding

__all__ = ["FIX", "DonateState"]

_OP_NAME = re.compile(r"parameter\(\d+\).*?op_name=\"([A-Za-z_][A-Za-z0-9_]*)")


def _jitted(code: Code) -> dict[cst.FunctionDef, list[JitSite]]:
    out: dict[cst.FunctionDef, list[JitSite]] = {}
    for fn in code.all(cst.FunctionDef):
        sites = find_jits(code, fn)
        if sites:
            out[fn] = sites
    return out


def _locate(code: Code, line: int, jitted: dict[cst.FunctionDef, list[JitSite]]) -> cst.FunctionDef | None:
    """The jitted function that ``line`` is in, calls, or jits."""
    fn = code.function_at(line)
    while fn is not None:
        if fn in jitted:
            return fn
        fn = code.enclosing(fn, cst.FunctionDef)
    for f, sites in jitted.items():
        for site in sites:
            if site.line == line:
                return f
            if any(code.line(c.call) <= line <= code.end_line(c.call) for c in jit_calls(code, site).calls):
                return f
    return None


def _params(site: JitSite) -> list[str]:
    skip = 1 if site.binds_self else 0
    return site.positional_params()[skip:] + site.keyword_only()


def _argument(hinted: str, params: list[str]) -> str | None:
    """The parameter a finding's argument name stands for (``state_cache_0_.1`` -> ``state``)."""
    if hinted in params:
        return hinted
    prefixed = [p for p in params if hinted.startswith((f"{p}_", f"{p}.", f"{p}["))]
    return max(prefixed, key=len) if prefixed else None


def _rebound_everywhere(code: Code, site: JitSite, param: str) -> bool:
    calls = jit_calls(code, site).calls
    if not calls:
        return False
    for c in calls:
        expr = bound_argument(site, c.call, param)
        stmt = code.statement_of(c.call)
        if not isinstance(expr, cst.Name) or not isinstance(stmt, cst.Assign):
            return False
        if not any(expr.value in assigned_names(t.target) for t in stmt.targets):
            return False
    return True


class DonateState(Codemod):
    """Add ``donate_argnames`` to the ``jax.jit`` of a function whose state is copied (module docstring)."""

    fix_id: ClassVar[str] = "donate-state"
    title: ClassVar[str] = "donate the state a jitted call rebinds"
    walks_stack: ClassVar[bool] = True
    VALID: ClassVar[tuple[SourceExample, ...]] = VALID
    INVALID: ClassVar[tuple[SourceExample, ...]] = INVALID

    def hint(self, finding: Finding) -> Hint:
        """The argument of the copied parameter: its ``op_name``'s first name, else its HLO name."""
        for ev in finding.evidence:
            m = _OP_NAME.search(ev)
            if m:
                return Hint(argument=m.group(1))
        name = dict(finding.extra).get("parameter_name")
        return Hint(argument=str(name)) if name else Hint()

    def candidates(self, code: Code) -> list[int]:
        """The ``def`` line of every jitted function."""
        return [code.line(fn) for fn in _jitted(code)]

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """Donate at the jit of the function ``line`` is in (or calls, or jits)."""
        jitted = _jitted(code)
        fn = _locate(code, line, jitted)
        if fn is None:
            return NotApplicable(f"line {line} is not in a function wrapped by jax.jit in this file, nor a call or "
                                 f"the jit of one")
        name = fn.name.value
        sites = jitted[fn]
        if hint.lines:
            chosen = [s for s in sites if any(code.line(c.call) <= ln <= code.end_line(c.call)
                                              for c in jit_calls(code, s).calls for ln in (line, *hint.lines))]
            sites = chosen or sites
        params = _params(sites[0])
        if hint.argument:
            arg = _argument(hint.argument, params)
            if arg is None:
                return NotApplicable(f"the copied parameter {hint.argument} is not an argument of {name}() "
                                     f"({', '.join(params) or 'none'})", "refused")
            wanted = [arg]
        else:
            wanted = [p for p in params if any(_rebound_everywhere(code, s, p) for s in sites)
                      and not any(p in s.static() for s in sites)]
            if not wanted:
                return NotApplicable(f"no argument of {name}() is rebound from its result by every call in this file")
        changes: dict[cst.CSTNode, Change] = {}
        imports: tuple[str, ...] = ()
        refusals: list[str] = []
        notes: list[str] = []
        safe = True
        done = 0
        for site in sites:
            todo = [p for p in wanted if p not in site.donated()]
            if not todo:
                done += 1
                continue
            static = [p for p in todo if p in site.static()]
            if static:
                refusals.append(f"{', '.join(static)} is static in the jit at line {site.line}: there is no buffer "
                                f"to donate")
                continue
            verdict = self._callers(code, site, todo)
            if not verdict.ok:
                refusals.append(verdict.reason)
                continue
            change = donation_change(code, site, todo)
            if isinstance(change, str):
                refusals.append(change)
                continue
            changes.update(change[0])
            imports += change[1]
            safe = safe and verdict.safe
            if verdict.reason:
                notes.append(verdict.reason)
        if not changes:
            if done and not refusals:
                return NotApplicable(f"{', '.join(wanted)} is already donated by the jit of {name}()", "already-applied")
            return NotApplicable(f"{name}(): " + "; ".join(refusals), "refused")
        edit = SiteEdit(line=code.line(fn), what=f"donate {', '.join(wanted)} in the jax.jit of {name}()",
                        safe=safe, note="; ".join(notes + [f"not changed: {r}" for r in refusals]))
        return Plan(edit, changes, imports)

    def _callers(self, code: Code, site: JitSite, params: list[str]) -> Verdict:
        calls = jit_calls(code, site)
        if calls.other:
            line, what = calls.other[0]
            return Verdict(False, reason=f"line {line}: {what}; its calls cannot all be checked")
        if not calls.calls:
            return Verdict(False, reason=f"no call of {site.function.name.value}() in this file: whether the caller "
                                         f"reads {', '.join(params)} after the call cannot be checked")
        safe, notes = True, []
        for c in calls.calls:
            for p in params:
                verdict = check_call(code, site, c.call, p)
                if not verdict.ok:
                    return verdict
                safe = safe and verdict.safe
                if verdict.reason:
                    notes.append(verdict.reason)
        return Verdict(True, safe=safe, reason="; ".join(dict.fromkeys(notes)))


FIX = DonateState()
