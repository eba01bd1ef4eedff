"""The line a finding names, widened to the function it starts.

The Python tracer records calls, not lines: a finding sized from the trace (an eager program issued
each step) names the line where the calling function STARTS (``def step():``), and an eager op's
own HLO stack can name wherever that op was first traced in the process (another file, an earlier
program). When the fix finds nothing to change at such a line, the statements of the function it
starts are tried; the fix applies there only when exactly one of them holds what it changes (two
would be a guess).
"""

from __future__ import annotations

import ast
from functools import lru_cache

from hlo_doctor.fixes.source.base import Hint, NotApplicable, Rewritten, SiteOutcome, SourceFix


@lru_cache(maxsize=64)
def function_body_lines(text: str, line: int) -> tuple[int, ...]:
    """The lines of the statements inside the function that starts at ``line`` (its ``def`` or its
    first decorator), nested statements included; () when no function starts there."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        starts = {node.lineno, *(d.lineno for d in node.decorator_list)}
        if line in starts:
            return tuple(sorted({n.lineno for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.stmt)}))
    return ()


def rewrite_at(fix: SourceFix, text: str, line: int, hint: Hint) -> tuple[int, SiteOutcome]:
    """``fix`` at ``line``, else at the one statement of the function starting there that it
    rewrites (see the module's docstring): the line it applied at and the outcome."""
    outcome = fix.rewrite(text, line, hint)
    if not (isinstance(outcome, NotApplicable) and outcome.kind == "no-pattern"):
        return line, outcome
    found = [(ln, o) for ln in function_body_lines(text, line)
             if isinstance(o := fix.rewrite(text, ln, hint), Rewritten)]
    return found[0] if len(found) == 1 else (line, outcome)
