"""Adding ``donate_argnames`` (or a position to ``donate_argnums``) to one ``jax.jit``, as written.

- ``@jax.jit`` becomes ``@functools.partial(jax.jit, donate_argnames="state")`` (``partial`` when the
  file imports it so; ``import functools`` is added when neither is there);
- a call (``jax.jit(f, ...)``, ``partial(jax.jit, ...)``, ``@jax.jit(...)``) gets the keyword, or the
  name is added to the ``donate_argnames`` it has; where it already has ``donate_argnums``, the
  position is added there instead (JAX does not merge the two lists when both are given).

Quotes follow the call's own strings; a call written one argument per line stays so.
"""

from __future__ import annotations

import libcst as cst

from hlo_doctor.fixes.source.code import Change, Code
from hlo_doctor.fixes.source.jit import JitSite, jit_names, keyword_value

__all__ = ["donation_change"]


def _quote(code: Code, node: cst.CSTNode | None) -> str:
    if node is not None:
        for s in code.all(cst.SimpleString, under=node):
            return "'" if s.value.startswith("'") else '"'
    return '"'


def _names_value(names: list[str], quote: str) -> cst.BaseExpression:
    if len(names) == 1:
        return cst.SimpleString(f"{quote}{names[0]}{quote}")
    return cst.Tuple([cst.Element(cst.SimpleString(f"{quote}{n}{quote}")) for n in names])


def _extended(value: cst.BaseExpression, new: list[cst.BaseExpression]) -> cst.BaseExpression:
    """``value`` (one item, a tuple or a list) with ``new`` items appended, as a tuple or list."""
    if isinstance(value, (cst.Tuple, cst.List)):
        elements = list(value.elements)
        last = elements[-1].comma if elements else None
        if elements and (last is cst.MaybeSentinel.DEFAULT or (
                isinstance(last, cst.Comma) and isinstance(last.whitespace_after, cst.SimpleWhitespace)
                and not last.whitespace_after.value)):
            # `(0)`, `(0,)`: one more on the same line.
            elements[-1] = elements[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        elements += [cst.Element(v, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                     for v in new[:-1]] + [cst.Element(new[-1])]
        return value.with_changes(elements=elements)
    return cst.Tuple([cst.Element(value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                      *[cst.Element(v, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for v in new[:-1]],
                      cst.Element(new[-1])])


def _with_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``keyword=value`` appended, keeping its layout (one line, or one argument per line)."""
    arg = cst.Arg(value=value, keyword=cst.Name(keyword),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    args = list(call.args)
    if not args:
        return call.with_changes(args=[arg])
    last = args[-1]
    if isinstance(last.comma, cst.Comma) and len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        # One argument per line with a trailing comma: the new one goes on a line of its own.
        args[-1] = last.with_changes(comma=args[-2].comma)
        args.append(arg.with_changes(comma=last.comma))
    elif isinstance(last.comma, cst.Comma):
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(arg.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(arg)
    return call.with_changes(args=args)


def _replace_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    return call.with_changes(args=[a.with_changes(value=value) if a.keyword is not None and a.keyword.value == keyword
                                   else a for a in call.args])


def donation_change(code: Code, site: JitSite, names: list[str]) -> tuple[dict[cst.CSTNode, Change], tuple[str, ...]] | str:
    """The node changes (and imports) that make ``site`` donate ``names``; a reason when it cannot."""
    quote = _quote(code, site.call)
    if site.call is None:
        assert site.decorator is not None
        spelled = jit_names(code)
        partial = "partial" if "partial" in spelled.partial else "functools.partial"
        imports = () if partial == "partial" else ("functools",)
        jit = site.decorator.decorator
        new = cst.Call(func=cst.parse_expression(partial), args=[
            cst.Arg(jit, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(_names_value(names, quote), keyword=cst.Name("donate_argnames"),
                    equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                          whitespace_after=cst.SimpleWhitespace("")))])
        return {site.decorator: site.decorator.with_changes(decorator=new)}, imports
    nums = keyword_value(site.call, "donate_argnums")
    if nums is not None:
        positions = [site.argnum(n) for n in names]
        missing = [n for n, p in zip(names, positions, strict=True) if p is None]
        if missing:
            return (f"the jit at line {site.line} lists donate_argnums and {', '.join(missing)} is keyword-only: "
                    f"JAX does not merge donate_argnames into it; add it by hand")
        value: cst.BaseExpression = _extended(nums, [cst.Integer(str(p)) for p in positions])
        return {site.call: _replace_keyword(site.call, "donate_argnums", value)}, ()
    existing = keyword_value(site.call, "donate_argnames")
    if existing is not None:
        value = _extended(existing, [cst.SimpleString(f"{quote}{n}{quote}") for n in names])
        return {site.call: _replace_keyword(site.call, "donate_argnames", value)}, ()
    return {site.call: _with_keyword(site.call, "donate_argnames", _names_value(names, quote))}, ()
