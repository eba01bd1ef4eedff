"""Monotone maps as the source writes them, and the selections that read them.

A map is peeled off an expression one layer at a time: ``jax.nn.softmax(x, axis=a)`` and
``log_softmax`` (increasing along ``a``, row by row), ``jnp.exp``/``jnp.tanh``/``jax.nn.sigmoid``
(increasing everywhere), ``x / T`` and ``x * c``/``c * x`` for a scale the source does not show to be
negative or zero (a temperature, a soft cap), and a float ``astype``. What is left is what the
selection can read instead. A selection is ``jnp.argmax``/``argmin`` (or the method), or
``jax.lax.top_k`` whose values are not read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node

from hlo_doctor.fixes.source.code import Code

__all__ = ["Peeled", "Selection", "describe", "peel", "selection_of"]

_ROW_MAPS = frozenset({"jax.nn.softmax", "jax.nn.log_softmax", "nn.softmax", "nn.log_softmax",
                       "keras.activations.softmax", "keras.activations.log_softmax", "keras.ops.softmax",
                       "keras.ops.log_softmax", "ops.softmax", "ops.log_softmax"})
_WORDS = {"/": "a division by a scale", "*": "a product with a scale", "astype": "a float astype"}
_ELEMENTWISE = frozenset({"jnp.exp", "jax.numpy.exp", "jnp.tanh", "jax.numpy.tanh", "jax.nn.sigmoid",
                          "nn.sigmoid"})
_SELECT = frozenset({"jnp.argmax", "jnp.argmin", "jax.numpy.argmax", "jax.numpy.argmin"})
_TOP_K = frozenset({"jax.lax.top_k", "lax.top_k"})
_FLOATS = frozenset({"float32", "float64", "bfloat16", "float16"})


def _name(node: cst.CSTNode) -> str:
    return get_full_name_for_node(node) or ""


@dataclass
class Peeled:
    """What a map chain leaves: the inner expression, the maps' names, the axes of row maps, and
    why a scale was trusted (or refused)."""

    inner: cst.BaseExpression
    maps: list[str] = field(default_factory=list)
    row_axes: list[str] = field(default_factory=list)
    refusal: str = ""


def describe(peeled: Peeled) -> str:
    """The maps in words, outermost first: ``softmax of a division by a scale``."""
    return " of ".join(_WORDS.get(m, m) for m in peeled.maps)


def _axis(call: cst.Call, position: int, default: str) -> str:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "axis":
            return _axis_text(a.value)
    positional = [a for a in call.args if a.keyword is None]
    return _axis_text(positional[position].value) if len(positional) > position else default


def _axis_text(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression,
                                                                                                    cst.Integer):
        return f"-{node.expression.value}"
    if isinstance(node, cst.Name) and node.value == "None":
        return "None"
    return node.value if isinstance(node, cst.Integer) else cst.Module([]).code_for_node(node)


def _negative(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return True
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.value) <= 0
    return False


def _scale(node: cst.BaseExpression) -> bool:
    """A scale the map may be trusted with: a name, an attribute, a number, or a negated one (refused later)."""
    return isinstance(node, (cst.Name, cst.Attribute, cst.Integer, cst.Float)) or (
        isinstance(node, cst.UnaryOperation) and isinstance(node.expression, (cst.Name, cst.Integer, cst.Float)))


def peel(expr: cst.BaseExpression) -> Peeled:
    """Peel every monotone map off ``expr`` (see the module docstring)."""
    out = Peeled(expr)
    while True:
        node = out.inner
        if isinstance(node, cst.Call):
            func = _name(node.func)
            if func in _ROW_MAPS and node.args and node.args[0].keyword is None:
                out.maps.append(func.rsplit(".", 1)[-1])
                out.row_axes.append(_axis(node, 1, "-1"))
                out.inner = node.args[0].value
                continue
            if func in _ELEMENTWISE and len(node.args) == 1:
                out.maps.append(func.rsplit(".", 1)[-1])
                out.inner = node.args[0].value
                continue
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "astype" and len(node.args) == 1 \
                    and _name(node.args[0].value).rsplit(".", 1)[-1] in _FLOATS:
                out.maps.append("astype")
                out.inner = node.func.value
                continue
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Divide) and _scale(node.right):
                scale, inner = node.right, node.left
            elif isinstance(node.operator, cst.Multiply) and _scale(node.right) and not _scale(node.left):
                scale, inner = node.right, node.left
            elif isinstance(node.operator, cst.Multiply) and _scale(node.left):
                scale, inner = node.left, node.right
            else:
                return out
            if _negative(scale):
                out.refusal = f"the scale {cst.Module([]).code_for_node(scale)} is not positive: it reverses the order"
                return out
            out.maps.append("/" if isinstance(node.operator, cst.Divide) else "*")
            out.inner = inner
            continue
        return out


@dataclass(frozen=True, slots=True)
class Selection:
    """A selection call reading ``arg``: its kind and the axis it selects along (``None``: flattened)."""

    call: cst.Call
    arg: cst.BaseExpression
    kind: str
    axis: str


def selection_of(code: Code, node: cst.CSTNode) -> Selection | str | None:
    """The selection that reads ``node`` directly; a reason when the selected values are read too;
    None when ``node`` is not read by a selection."""
    parent = code.parent(node)
    if isinstance(parent, cst.Arg) and parent.keyword is None:
        call = code.parent(parent)
        if isinstance(call, cst.Call) and call.args and call.args[0] is parent:
            func = _name(call.func)
            if func in _SELECT:
                return Selection(call, parent.value, func.rsplit(".", 1)[-1], _axis(call, 1, "None"))
            if func in _TOP_K:
                holder = code.parent(call)
                if isinstance(holder, cst.Subscript) and holder.value is call and len(holder.slice) == 1 and \
                        isinstance(holder.slice[0].slice, cst.Index) and \
                        _axis_text(holder.slice[0].slice.value) == "1":
                    return Selection(call, parent.value, "top_k", "-1")
                stmt = code.statement_of(call)
                if isinstance(stmt, cst.Assign) and stmt.value is call and isinstance(stmt.targets[0].target, cst.Tuple):
                    first = stmt.targets[0].target.elements[0].value
                    if isinstance(first, cst.Name) and first.value == "_":
                        return Selection(call, parent.value, "top_k", "-1")
                return f"the values top_k selects are read at line {code.line(call)}, not only its indices"
    if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in ("argmax", "argmin"):
        call = code.parent(parent)
        if isinstance(call, cst.Call) and call.func is parent:
            return Selection(call, node, parent.attr.value, _axis(call, 0, "None"))  # type: ignore[arg-type]
    return None
