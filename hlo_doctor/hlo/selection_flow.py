"""Value flow back from a selection: the monotone map an argmax/argmin/top-k reads through.

``argmax(softmax(x / T)) == argmax(x)``: a selection that keeps only indices does not depend on any
strictly increasing map applied to every element of a row (per-row constants allowed). This module
walks back from a selection's data input, across fusion boundaries, through such maps (widening
converts, ``exp``/``log``, subtracting or adding a row constant, multiplying or dividing by a positive
row constant) to the value they were applied to, and names the entry-level ops that exist only for
that map: the ones a program that selects on the value directly would not run.

Ops are grouped by *level*: the computation that runs them one by one (the entry, or a ``while``
body). A fused instruction belongs to the fusion that executes it (:func:`~.navigation.entry_op`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from hlo_doctor.hlo import HloInstruction, HloModule, real_work
from hlo_doctor.hlo.level_ops import level_users, only_for, ops_feeding, work_inside
from hlo_doctor.hlo.navigation import callers, entry_op
from hlo_doctor.hlo.reductions import reduce_inputs, selection_reduce_kind

__all__ = ["MONOTONE_UNARY", "TRANSCENDENTAL", "MonotoneMap", "monotone_maps", "tuple_element_used"]

# Elementwise maps that never decrease (float converts: narrowing ones round, which may only make
# ties; XLA:CPU's bf16 normalisation inserts such round trips; tanh saturates only past |x| ~ 9,
# far beyond a soft cap's x / c).
MONOTONE_UNARY = frozenset({"convert", "exponential", "log", "log-plus-one", "exponential-minus-one", "logistic",
                            "tanh"})
TRANSCENDENTAL = frozenset({"exponential", "log", "log-plus-one", "exponential-minus-one", "logistic", "tanh"})
# The maps whose cost is worth a finding on their own when fused into the selection's op.
_COSTLY = TRANSCENDENTAL | {"reduce"}
_MOVE = frozenset({"bitcast", "reshape", "copy"})
_LIMIT = 256  # bound on walks: chains are short, the bound guards against malformed input
_CONSTANT = re.compile(r"\bconstant\(([^()]{1,200})\)")
_NUMBER = re.compile(r"-?inf|nan|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True, slots=True)
class MonotoneMap:
    """A selection reading a monotone map of a value, and what that map costs the program."""

    selection: HloInstruction
    """The reduce / custom call / sort that selects (inside its fusion when fused)."""
    selection_op: HloInstruction
    """The level op executing the selection."""
    kind: str
    """``argmax``, ``argmin``, ``top-k`` or ``sort``."""
    source: HloInstruction
    """The value the map is applied to (the logits)."""
    steps: tuple[HloInstruction, ...]
    """The map's instructions on the path from the selection back to ``source`` (selection side first)."""
    ops: tuple[HloInstruction, ...]
    """Level ops that exist only for the map (not the selection's op, not the source's)."""
    fused: tuple[HloInstruction, ...]
    """Map instructions executed inside the selection's own op (row constants' work included)."""
    source_op: HloInstruction
    """The level op producing ``source`` (``source`` itself for a parameter)."""
    in_source: tuple[HloInstruction, ...]
    """Map instructions XLA fused into the source's op (a matmul with the softmax's max and exp)."""


def tuple_element_used(module: HloModule, inst: HloInstruction, index: int) -> bool:
    """Whether element ``index`` of ``inst``'s tuple result is read by anything.

    Follows a fusion root to the fusion's users; any user other than a ``get-tuple-element`` of
    another index counts as a use (a tuple passed on whole, the program's output).
    """
    stack, seen = [inst], set()
    while stack:
        v = stack.pop()
        if (v.computation, v.name) in seen:
            continue
        seen.add((v.computation, v.name))
        comp = module.computation(v.computation)
        if comp is not None and comp.root.name == v.name:
            caller = callers(module).get(v.computation)
            if caller is None or caller.opcode != "fusion":
                return True  # the program's (or a loop body's) result
            stack.append(caller)
        for u in module.users_of(v):
            if u.opcode != "get-tuple-element" or int(u.attribute("index", "0") or 0) == index:
                return True
    return False


def _selections(module: HloModule) -> Iterator[tuple[HloInstruction, str, HloInstruction]]:
    """(selection, kind, data input) for every selection whose selected values are not read."""
    for inst in module.instructions():
        kind = selection_reduce_kind(module, inst)
        if kind in ("argmax", "argmin") or (kind == "top-k" and inst.shape.is_tuple):
            if not tuple_element_used(module, inst, 0):
                data = module.instruction(reduce_inputs(inst)[0], inst.computation)
                if data is not None:
                    yield inst, kind, data
        elif inst.opcode == "sort" and len(inst.operands) == 2 and inst.shape.is_tuple:
            ops = module.operands_of(inst)
            if len(ops) == 2 and _is_iota(module, ops[1]) and not tuple_element_used(module, inst, 0):
                yield inst, "sort", ops[0]


def _is_iota(module: HloModule, v: HloInstruction) -> bool:
    for _ in range(8):
        if v.opcode == "iota":
            return True
        body = module.fusion_body(v)
        if body is not None:
            v = body.root
        elif v.opcode in _MOVE and v.operands and (nxt := module.instruction(v.operands[0], v.computation)):
            v = nxt
        else:
            return False
    return False


def _up(module: HloModule, v: HloInstruction) -> HloInstruction | None:
    """The value ``v`` stands for one step up, when ``v`` only moves a value: a fusion parameter
    (its caller's operand), a fusion (its root), a tuple element, a bitcast/reshape/copy."""
    if v.opcode == "parameter":
        caller = callers(module).get(v.computation)
        if caller is None or caller.opcode != "fusion" or v.parameter_number is None \
                or v.parameter_number >= len(caller.operands):
            return None
        return module.instruction(caller.operands[v.parameter_number], caller.computation)
    if v.opcode in _MOVE and v.operands:
        return module.instruction(v.operands[0], v.computation)
    body = module.fusion_body(v)
    if body is not None:
        return None if body.root.opcode == "tuple" or body.root.shape.is_tuple else body.root
    if v.opcode == "get-tuple-element" and v.operands:
        producer = module.instruction(v.operands[0], v.computation)
        index = int(v.attribute("index", "0") or 0)
        if producer is None:
            return None
        if producer.opcode == "fusion" and (body := module.fusion_body(producer)) is not None:
            producer = body.root
        if producer.opcode == "tuple" and index < len(producer.operands):
            return module.instruction(producer.operands[index], producer.computation)
    return None


def _broadcast_of(module: HloModule, v: HloInstruction) -> HloInstruction | None:
    """The ``broadcast`` that ``v`` is (through data movement and fusion boundaries), or None."""
    for _ in range(16):
        if v.opcode == "broadcast":
            return v
        nxt = _up(module, v)
        if nxt is None:
            return None
        v = nxt
    return None


def _row_constant(module: HloModule, v: HloInstruction, dims: frozenset[int] | None) -> HloInstruction | None:
    """The broadcast operand when ``v`` is constant along the selected dimensions ``dims`` (of
    ``v``'s shape): a broadcast that maps none of its operand's dimensions onto them (a per-row max,
    sum or scalar). Reached through data movement that keeps the shape; a scalar is constant along
    anything, whatever moved it (``dims`` None: the selected dimensions are not known here)."""
    b: HloInstruction | None = v
    same_shape = True
    for _ in range(16):
        if b is None or b.opcode == "broadcast":
            break
        nxt = _up(module, b)
        same_shape = same_shape and nxt is not None and nxt.shape.dims == b.shape.dims
        b = nxt
    if b is None or b.opcode != "broadcast" or not b.operands:
        return None
    src = module.instruction(b.operands[0], b.computation)
    if src is None:
        return None
    if src.shape.num_elements == 1:
        return src
    if dims is None or not same_shape or b.shape.dims != v.shape.dims:
        return None
    mapped = {int(d) for d in b.attribute("dimensions").strip("{}").split(",") if d.strip().isdigit()}
    return None if mapped & dims else src


def _moved_dims(src: HloInstruction, dst: HloInstruction, dims: frozenset[int] | None) -> frozenset[int] | None:
    """The selected dimensions ``dims`` of ``src``'s shape, as dimensions of ``dst``'s (one step up
    through data movement); None when the move does not keep them apart (a transposing bitcast)."""
    if dims is None:
        return None
    a, b = src.shape, dst.shape
    if a.dims == b.dims:
        return dims
    for shape in (a, b):
        if shape.layout and shape.minor_to_major != tuple(reversed(range(len(shape.dims)))):
            return None  # not row-major: a bitcast there may transpose
    out: set[int] = set()
    for d in dims:
        prefix = 1
        for size in a.dims[:d]:
            prefix *= size
        hit = None
        acc = 1
        for i, size in enumerate(b.dims):
            if acc == prefix and size == a.dims[d]:
                hit = i
                break
            acc *= size
        if hit is None:
            return None
        out.add(hit)
    return frozenset(out)


def _constant_values(v: HloInstruction) -> list[float]:
    """The values of a small ``constant`` (``constant(0.5)``, ``constant({1})``); [] otherwise."""
    m = _CONSTANT.search(v.raw) if v.opcode == "constant" else None
    if m is None:
        return []
    return [float(x) for x in _NUMBER.findall(m.group(1))]


def _positive(module: HloModule, v: HloInstruction | None, depth: int = 0) -> bool:
    """True when ``v`` is known positive (a scale a selection is invariant under).

    Entry and loop parameters count as positive: the temperature of ``x / T`` is one, and sampling
    code keeps it above zero (a zero or negative temperature is a different sampler).
    """
    if v is None or depth > 32:
        return False
    op = v.opcode
    if op == "constant":
        values = _constant_values(v)
        return bool(values) and all(x > 0 for x in values)
    if op == "parameter":
        up = _up(module, v)
        return True if up is None else _positive(module, up, depth + 1)
    if op in ("exponential", "logistic", "sqrt", "rsqrt"):
        return True
    if op in ("broadcast", "convert", *_MOVE, "get-tuple-element", "fusion"):
        nxt = module.instruction(v.operands[0], v.computation) if op in ("broadcast", "convert") and v.operands \
            else _up(module, v)
        return _positive(module, nxt, depth + 1)
    if op in ("multiply", "divide", "add"):
        return all(_positive(module, o, depth + 1) for o in module.operands_of(v))
    if op == "maximum":
        return any(_positive(module, o, depth + 1) for o in module.operands_of(v))
    if op == "reduce" and v.called_computations and len(v.operands) == 2:
        reducer = module.computation(v.called_computations[0])
        adds = reducer is not None and {i.opcode for i in reducer.instructions if real_work(i)} == {"add"}
        return adds and _positive(module, module.instruction(v.operands[0], v.computation), depth + 1)
    return False


def _zero_sign_fix(module: HloModule, v: HloInstruction) -> HloInstruction | None:
    """``x`` when ``v`` is ``where((x == 0) & signbit(x), -tiny, x)``: keras' argmax on CPU turns -0.0
    into the smallest negative normal (an order-preserving tie break), else None."""
    ops = module.operands_of(v)
    if v.opcode != "select" or len(ops) != 3:
        return None
    pred, on_true, x = ops
    b = _broadcast_of(module, on_true)
    c = module.instruction(b.operands[0], b.computation) if b is not None and b.operands else None
    values = _constant_values(c) if c is not None else []
    if len(values) != 1 or not -1.2e-38 <= values[0] <= 0.0:
        return None
    stack, seen = [pred], 0
    while stack and seen < 32:
        p = stack.pop()
        seen += 1
        if p.opcode == "compare" and p.attribute("direction") == "EQ" and x.name in p.operands:
            return x
        if p.opcode in ("and", "or", "not", *_MOVE):
            stack.extend(module.operands_of(p))
    return None


def _step(module: HloModule, v: HloInstruction,
          dims: frozenset[int] | None) -> tuple[HloInstruction, list[HloInstruction]] | None:
    """(the value ``v`` maps, row-constant operands) when ``v`` is a monotone map of one operand."""
    ops = module.operands_of(v)
    op = v.opcode
    if op == "select":
        x = _zero_sign_fix(module, v)
        return (x, []) if x is not None else None
    if op in MONOTONE_UNARY and len(ops) == 1:
        if op == "convert" and not (v.dtype.startswith(("f", "bf")) and ops[0].dtype.startswith(("f", "bf"))):
            return None  # integer converts saturate and wrap
        return ops[0], []
    if len(ops) != 2:
        return None
    consts = [_row_constant(module, o, dims) for o in ops]
    if op in ("add", "multiply"):
        for i in (0, 1):
            c = consts[1 - i]
            if consts[i] is None and c is not None and (op == "add" or _positive(module, c)):
                return ops[i], [c]
        return None
    if op in ("subtract", "divide") and consts[0] is None and consts[1] is not None:
        if op == "subtract" or _positive(module, consts[1]):
            return ops[0], [consts[1]]
    return None


def _selected_dims(selection: HloInstruction, data: HloInstruction) -> frozenset[int]:
    """The dimensions of ``data`` a selection selects along (a top-k's last when not printed)."""
    text = selection.attribute("dimensions").strip("{}")
    picked = {int(d) for d in text.split(",") if d.strip().isdigit()}
    return frozenset(picked) if picked else frozenset({len(data.shape.dims) - 1})


def _map_of(module: HloModule, selection: HloInstruction, kind: str, data: HloInstruction) -> MonotoneMap | None:
    dims: frozenset[int] | None = _selected_dims(selection, data)
    steps: list[HloInstruction] = []
    aux: list[HloInstruction] = []
    cur = data
    for _ in range(_LIMIT):
        up = _up(module, cur)
        if up is not None:
            dims = _moved_dims(cur, up, dims)
            cur = up
            continue
        step = _step(module, cur, dims)
        if step is None:
            break
        steps.append(cur)
        aux.extend(step[1])
        cur = step[0]
    if not any(s.opcode not in ("convert", "select") for s in steps):
        return None  # nothing, or only widening (HD004's case) and keras' -0.0 tie break: not a map
    sel_op = entry_op(module, selection)
    src_op = entry_op(module, cur)
    level = sel_op.computation
    if src_op.computation != level:
        src_op = cur  # the source is a parameter of the level computation
    chain = {entry_op(module, s).name for s in steps} - {sel_op.name, src_op.name}
    stop = {(s.computation, s.name) for s in steps} | {(cur.computation, cur.name)}
    extra = ops_feeding(module, aux, level, {sel_op.name, src_op.name} | chain, stop)
    only = only_for(module, level, chain | extra, {sel_op.name, src_op.name})
    if not chain <= only:
        return None  # the mapped values are read elsewhere too (probabilities returned): needed
    in_source = [s for s in steps if entry_op(module, s) is src_op] + work_inside(module, aux, src_op, stop)
    if in_source and any(u is None or (u.name not in only and u.name != sel_op.name)
                         for u in level_users(module, src_op)):
        return None  # the op computing the logits also computes the map, and its result is read elsewhere
    fused = [s for s in steps if entry_op(module, s) is sel_op] + work_inside(module, aux, sel_op, stop)
    if not only and not any(f.opcode in _COSTLY for f in (*fused, *in_source)):
        return None  # a scale fused into the selection: a multiply per element, nothing to report
    comp = module.computation(level)
    order = tuple(i for i in comp.instructions if i.name in only) if comp is not None else ()
    return MonotoneMap(selection, sel_op, kind, cur, tuple(steps), order, tuple(fused), src_op, tuple(in_source))


def monotone_maps(module: HloModule) -> Iterator[MonotoneMap]:
    """Every selection of ``module`` that reads a monotone map of a value (no more than one per
    selection), where the map is not also read by anything else."""
    for selection, kind, data in _selections(module):
        found = _map_of(module, selection, kind, data)
        if found is not None:
            yield found
