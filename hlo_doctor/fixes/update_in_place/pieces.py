"""The pieces of a rebuilt buffer: the concatenate that puts a slab back, and the update that made it.

``cache = jnp.concatenate([cache[:i], layer[None], cache[i + 1:]], axis=0)`` is a :class:`Rebuild`
(buffer ``cache``, index ``i``, slab ``layer``); ``layer = jax.lax.dynamic_update_slice(cache[i], row,
(0, t, 0))`` or ``layer = cache[i].at[:, t].set(row)`` before it is its :class:`Update`. Both are
read from the source as written: names, not values.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.source.code import Code
from hlo_doctor.fixes.source.flow import name_uses, reads_after, scope_of

__all__ = ["Rebuild", "Update", "rebuild_in", "restacked", "update_of"]

_CONCAT = frozenset({"jnp.concatenate", "jax.numpy.concatenate", "numpy.concatenate"})
_DUS = frozenset({"jax.lax.dynamic_update_slice", "lax.dynamic_update_slice"})


def _src(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


@dataclass(frozen=True, slots=True)
class Rebuild:
    """``buffer = concatenate([buffer[:index], slab[None], buffer[index + 1:]])``: its statement, line
    node, the names and the ``slab`` name node inside the concatenate."""

    stmt: cst.Assign
    line_node: cst.SimpleStatementLine
    buffer: str
    index: str
    slab: str
    slab_node: cst.Name


@dataclass(frozen=True, slots=True)
class Update:
    """``slab = <update of buffer[index]>``: the statement, the reads of ``slab`` after it, the new
    text of the update made on the stacked buffer (see :meth:`in_place`)."""

    stmt: cst.Assign
    reads: tuple[cst.Name, ...]
    func: str
    value: cst.BaseExpression
    position: cst.BaseExpression | tuple[cst.SubscriptElement, ...]

    def in_place(self, buffer: str, index: str) -> str:
        """The same update made on the stacked buffer: the slab's index goes first."""
        value = _src(self.value)
        if self.func == ".at":
            assert isinstance(self.position, tuple)
            return f"{buffer}.at[{', '.join([index, *(_src(e.slice) for e in self.position)])}].set({value})"
        if not isinstance(self.value, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)):
            value = f"({value})"
        pos = self.position
        assert isinstance(pos, cst.BaseExpression)
        starts = ", ".join([index, *(_src(e.value) for e in pos.elements)]) if isinstance(pos, (cst.Tuple, cst.List)) \
            else f"{index}, *{_src(pos)}"
        return f"{self.func}({buffer}, {value}[None], ({starts}))"


def _name_sliced(node: cst.BaseExpression, lower: bool) -> tuple[str, cst.BaseExpression] | None:
    """``(buf, bound)`` of ``buf[:bound]`` (``lower`` False) or ``buf[bound:]`` (``lower`` True)."""
    if not (isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and len(node.slice) == 1):
        return None
    s = node.slice[0].slice
    if not isinstance(s, cst.Slice) or s.step is not None:
        return None
    bound, other = (s.lower, s.upper) if lower else (s.upper, s.lower)
    return (node.value.value, bound) if bound is not None and other is None else None


def _slab_name(node: cst.BaseExpression) -> cst.Name | None:
    """``x`` of ``x[None]``, ``x[None, ...]``, ``x[jnp.newaxis]``, ``jnp.expand_dims(x, 0)``."""
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and 1 <= len(node.slice) <= 2:
        first = node.slice[0].slice
        rest = node.slice[1:]
        new_axis = isinstance(first, cst.Index) and (get_full_name_for_node(first.value) or "") in (
            "None", "jnp.newaxis", "np.newaxis", "numpy.newaxis")
        if new_axis and all(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Ellipsis) for e in rest):
            return node.value
    if isinstance(node, cst.Call) and (get_full_name_for_node(node.func) or "") in ("jnp.expand_dims",) and \
            len(node.args) == 2 and isinstance(node.args[0].value, cst.Name) and \
            isinstance(node.args[1].value, cst.Integer) and node.args[1].value.value == "0":
        return node.args[0].value
    return None


def _axis_zero(call: cst.Call) -> bool:
    axis = [a.value for a in call.args[1:] if a.keyword is None or a.keyword.value == "axis"]
    return not axis or (len(axis) == 1 and isinstance(axis[0], cst.Integer) and axis[0].value == "0")


def _non_negative(code: Code, node: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """``node`` is a non-negative integer literal, or the counter of a ``for`` over ``range(n)`` or
    ``range(<literal >= 0>, ...)`` around ``at``."""
    if isinstance(node, cst.Integer):
        return True
    if not isinstance(node, cst.Name):
        return False
    for a in code.ancestors(at):
        if isinstance(a, cst.For) and isinstance(a.target, cst.Name) and a.target.value == node.value:
            it = a.iter
            return isinstance(it, cst.Call) and get_full_name_for_node(it.func) == "range" and \
                (len(it.args) == 1 or isinstance(it.args[0].value, cst.Integer))
    return False


def rebuild_in(code: Code, stmt: cst.BaseSmallStatement) -> Rebuild | str | None:
    """``stmt`` as a :class:`Rebuild`; a reason when it is one that cannot be rewritten; else None."""
    if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name)
            and isinstance(stmt.value, cst.Call) and (get_full_name_for_node(stmt.value.func) or "") in _CONCAT):
        return None
    call = stmt.value
    parts = call.args[0].value if call.args and call.args[0].keyword is None else None
    if not isinstance(parts, (cst.List, cst.Tuple)) or len(parts.elements) != 3 or not _axis_zero(call):
        return None
    head = _name_sliced(parts.elements[0].value, lower=False)
    tail = _name_sliced(parts.elements[2].value, lower=True)
    slab = _slab_name(parts.elements[1].value)
    target = stmt.targets[0].target.value
    if head is None or tail is None or slab is None or not head[0] == tail[0] == target:
        return None
    index = _src(head[1])
    if _src(tail[1]).replace(" ", "") != f"{index}+1".replace(" ", ""):
        return None
    if not _non_negative(code, head[1], stmt):
        return (f"the index {index} may be negative: {target}[{index}] and an update starting at {index} would "
                f"name different slabs")
    line = code.parent(stmt)
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return f"line {code.line(stmt)} holds more than the concatenate"
    return Rebuild(stmt, line, target, index, slab.value, slab)


def _last_binding(code: Code, name: str, before: cst.CSTNode) -> cst.BaseSmallStatement | None:
    earlier = [u for u in name_uses(code, scope_of(code, before), name)
               if u.kind == "store" and not u.nested and u.position < code.position(before)]
    return code.statement_of(earlier[-1].node) if earlier else None


def _slab_of(node: cst.BaseExpression, buffer: str, index: str) -> bool:
    """``node`` is ``buffer[index]``."""
    return isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value == buffer and \
        len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) and _src(node.slice[0].slice.value) == index


def _update_parts(value: cst.BaseExpression, rb: Rebuild) -> tuple[str, cst.BaseExpression,
                                                                    cst.BaseExpression | tuple[cst.SubscriptElement, ...]] | None:
    if isinstance(value, cst.Call) and (get_full_name_for_node(value.func) or "") in _DUS and len(value.args) == 3 \
            and all(a.keyword is None and not a.star for a in value.args) and _slab_of(value.args[0].value, rb.buffer,
                                                                                      rb.index):
        return get_full_name_for_node(value.func) or "", value.args[1].value, value.args[2].value
    func = value.func if isinstance(value, cst.Call) else None
    if isinstance(value, cst.Call) and isinstance(func, cst.Attribute) and func.attr.value == "set" and \
            len(value.args) == 1 and value.args[0].keyword is None and isinstance(func.value, cst.Subscript):
        at = func.value.value
        index = tuple(func.value.slice)
        plain = all(not (isinstance(e.slice, cst.Index) and get_full_name_for_node(e.slice.value) == "None")
                    for e in index)
        if isinstance(at, cst.Attribute) and at.attr.value == "at" and _slab_of(at.value, rb.buffer, rb.index) and plain:
            return ".at", value.args[0].value, index
    return None


def update_of(code: Code, rb: Rebuild) -> Update | str:
    """The update that made ``rb``'s slab from ``buffer[index]``, or why it cannot be made in place."""
    bound = _last_binding(code, rb.slab, rb.stmt)
    if not isinstance(bound, cst.Assign) or len(bound.targets) != 1 or not isinstance(bound.targets[0].target, cst.Name):
        return f"{rb.slab} is not bound by an assignment before line {code.line(rb.stmt)} in this function"
    parts = _update_parts(bound.value, rb)
    if parts is None:
        return (f"{rb.slab} (line {code.line(bound)}) is {' '.join(_src(bound.value).split())[:80]}, not an update of "
                f"{rb.buffer}[{rb.index}] written here (dynamic_update_slice or .at[...].set): which rows it changes "
                f"is not visible in this file")
    owner = code.parent(bound)
    if not isinstance(owner, cst.SimpleStatementLine) or len(owner.body) != 1 or \
            code.parent(owner) is not code.parent(rb.line_node):
        return f"the update of {rb.slab} (line {code.line(bound)}) and the concatenate are not in one block"
    start, end = code.end_position(bound), code.position(rb.stmt)
    between = [u for u in name_uses(code, scope_of(code, rb.stmt), rb.buffer) if start <= u.position < end]
    if between:
        return (f"{rb.buffer} is {'read' if between[0].kind == 'load' else 'rebound'} at line {between[0].line}, between "
                f"the update and the concatenate: updating it earlier would change what that line sees")
    reads = reads_after(code, bound, rb.slab)
    if isinstance(reads, str):
        return reads
    return Update(bound, tuple(reads), parts[0], parts[1], parts[2])


def restacked(code: Code, stmt: cst.BaseSmallStatement) -> str:
    """Why a buffer put back together from a list (``cache = jnp.stack(caches, axis=1)``) is left; "" otherwise."""
    if not (isinstance(stmt, cst.Assign) and isinstance(stmt.value, cst.Call) and stmt.value.args and
            isinstance(stmt.value.args[0].value, cst.Name)):
        return ""
    func = (get_full_name_for_node(stmt.value.func) or "").rsplit(".", 1)[-1]
    if func not in ("stack", "concatenate"):
        return ""
    pieces = stmt.value.args[0].value.value
    source = ""
    for call in code.all(cst.Call, under=scope_of(code, stmt)):
        f = call.func
        if isinstance(f, cst.Attribute) and f.attr.value == "append" and isinstance(f.value, cst.Name) and \
                f.value.value == pieces and call.args and isinstance(call.args[0].value, cst.Name):
            piece = _last_binding(code, call.args[0].value.value, call)
            if piece is not None:
                source = f"; each piece is {' '.join(_src(piece).split())[:100]} (line {code.line(piece)})"
    return (f"the buffer is put back together from the list {pieces} by {func}(){source}: making it one update of the "
            f"stacked buffer needs each piece's rows, which this fix reads only from "
            f"concatenate([buf[:i], x[None], buf[i + 1:]]) with x an update of buf[i] written in this function")
