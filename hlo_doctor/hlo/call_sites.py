"""The line of a call inside a function, from the function's source: what the Python tracer cannot say.

The Python tracer names a frame by the line its function STARTS at (``$runner.py:135
_sample_from_logits``: the code object's first line, a decorator's when it has one), never the line
that made the call below it. A finding on an eager program (an ``x.astype(f32)`` issued every step)
knows the caller's frame and the call's own outermost frame (``$array_methods.py:116 _astype``):
:func:`call_line` reads the caller's source and finds the call, so the line a person edits is the
``astype``, not the ``def``.

It reads the file as it is on this machine (the captured path, else the longest trailing part of it
under the working folder) and trusts it only while it still matches the capture: a function of that
name must start at that line. The callee matches a call by name with leading underscores dropped
(``_astype`` is ``Array.astype``; ``asarray`` is ``jnp.asarray(...)``). Several calls of that name
in the function: the ``ordinal``-th (the caller's ``ordinal``-th call frame of that name, in time
order) when there are that many, else none. None whenever it cannot tell; the caller then keeps the
tracer's line.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path, PurePosixPath

__all__ = ["call_line", "starts_at"]

_MIN_TAIL = 2
"""A path from another machine maps onto the working folder by at least this many trailing parts."""


def call_line(path: str, def_line: int, function: str, callee: str, ordinal: int = 0) -> int | None:
    """The line in ``path`` of the call to ``callee`` made by ``function`` (whose code starts at
    ``def_line``), or None (see the module's docstring)."""
    stamped = _stamped(path) if path and def_line >= 1 and function and callee else None
    if stamped is None:
        return None
    sites = _sites(*stamped, def_line, function.rsplit(".", 1)[-1], callee.lstrip("_"))
    if sites is None or not sites:
        return None
    if len(sites) == 1:
        return sites[0]
    return sites[ordinal] if 0 <= ordinal < len(sites) else None


def starts_at(path: str, def_line: int, function: str) -> bool | None:
    """Whether the file ``path`` (as :func:`call_line` finds it on this machine) defines a function
    ``function`` whose code starts at ``def_line`` (its ``def``, or a decorator's line): tells which of
    several files of one base name a tracer frame (``$helpers.py:4 widen``) ran. None when the file
    cannot be read or parsed here (a capture from another machine)."""
    stamped = _stamped(path) if path and def_line >= 1 and function else None
    if stamped is None:
        return None
    return _starts(*stamped, def_line, function.rsplit(".", 1)[-1])


def _stamped(path: str) -> tuple[str, int, int] | None:
    """The file on this machine (:func:`_local`), its modification time and size: what the parses
    are cached by, so a long-lived process (the MCP server, a test run) that reads a file again after
    it changed reads it anew instead of an earlier answer."""
    local = _local(path)
    if local is None:
        return None
    try:
        st = local.stat()
    except OSError:
        return None
    return str(local), st.st_mtime_ns, st.st_size


@lru_cache(maxsize=256)
def _starts(path: str, mtime_ns: int, size: int, def_line: int, function: str) -> bool | None:
    if _tree(path) is None:
        return None
    return _function(path, def_line, function) is not None


def _tree(path: str) -> ast.Module | None:
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


def _function(path: str, def_line: int, function: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function ``function`` whose code starts at ``def_line`` in ``path``; None when the file
    cannot be read or none starts there."""
    tree = _tree(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function and \
                def_line in {node.lineno, *(d.lineno for d in node.decorator_list)}:
            return node
    return None


def _local(path: str) -> Path | None:
    """The file on this machine: the path itself, else its longest trailing part under the working folder."""
    p = Path(path)
    try:
        if p.is_file():
            return p
        parts = PurePosixPath(path.replace("\\", "/")).parts
        cwd = Path.cwd()
        for start in range(1 if parts and parts[0] == "/" else 0, len(parts) - _MIN_TAIL + 1):
            candidate = cwd.joinpath(*parts[start:])
            if candidate.is_file():
                return candidate
    except OSError:
        return None
    return None


@lru_cache(maxsize=256)
def _sites(path: str, mtime_ns: int, size: int, def_line: int, function: str,
           callee: str) -> tuple[int, ...] | None:
    """Lines of the calls named ``callee`` in the body of ``function`` starting at ``def_line``, in
    source order; None when the file cannot be read or no such function starts there."""
    node = _function(path, def_line, function)
    if node is None:
        return None
    return tuple(sorted({_line(call) for call in _own_calls(node) if _name(call).lstrip("_") == callee}))


def _own_calls(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    """The calls in ``fn``'s body, not those of functions or classes defined inside it (their frames
    are their own)."""
    out: list[ast.Call] = []
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _line(call: ast.Call) -> int:
    """The line that names the function called (``.astype`` of a call chained over several lines)."""
    func = call.func
    return (func.end_lineno or call.lineno) if isinstance(func, ast.Attribute) else call.lineno


def _name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""
