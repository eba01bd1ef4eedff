"""Where the pieces of one loop-carried element go in a ``while`` body: positions through data movement.

:func:`walk_element` gives every instruction of a body (and of the fusions it calls) an abstract value:
either a :class:`View` of the incoming element k (which box of it the value holds, along which of its
dimensions, how many of its values may differ: the updates written into it) or None (anything else).
Views follow what only moves data: slices and dynamic-slices at constant offsets, dynamic-update-slices
(the update adds to ``differ``), concatenations of pieces that sit side by side in the element, copies,
bitcasts and reshapes that keep dimensions whole, transposes, converts that keep every value (bf16 ->
f32 -> bf16), and fusions of these. A ``select``, a ``pad``, arithmetic, or a slice at a position known
only at run time gives None: the walk never guesses what a value holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hlo_doctor.hlo import DTYPE_BITS, FLOAT_DTYPES, HloComputation, HloInstruction, HloModule, HloShape

__all__ = ["Value", "View", "ViewTuple", "Walk", "is_whole", "walk_element"]

_SLICE = re.compile(r"\[(-?\d+):(-?\d+)(?::(-?\d+))?\]")
_CONSTANT = re.compile(r"constant\((-?\d+)\)")


@dataclass(frozen=True, slots=True)
class View:
    """A value that holds ``box`` of the incoming element, except ``differ`` bytes."""

    box: tuple[tuple[int, int], ...]
    """(start, stop) per dimension of the element."""
    dims: tuple[int | None, ...]
    """Per dimension of the value: the element dimension it runs along (None: size 1, not known)."""
    differ: int
    """Elements of the value that may differ from the element's (updates written into it)."""
    ops: frozenset[str] = frozenset()
    """The body-level ops the value went through."""
    cut: bool = False
    """The element was cut into pieces on the way (a slice, then a concatenation)."""


@dataclass(frozen=True, slots=True)
class ViewTuple:
    """The values of a tuple (a multi-output fusion's result)."""

    items: tuple[View | ViewTuple | None, ...]


Value = View | ViewTuple | None


@dataclass(frozen=True, slots=True)
class Walk:
    """The abstract values of a body's instructions for one element of its state."""

    values: dict[str, Value]
    """Body-level instruction name -> its value."""
    joins: tuple[tuple[str, HloInstruction], ...]
    """(body-level op, the concatenate in it) for every concatenation that put pieces back together."""


def walk_element(module: HloModule, body: HloComputation, index: int, element: HloShape) -> Walk:
    """The values of ``body``'s instructions, for element ``index`` of its state (shape ``element``)."""
    walker = _Walker(module, body, body.parameters[0], index, element)
    values = walker.run()
    return Walk(values, tuple(walker.joins))


def is_whole(v: View, shape: HloShape, element: HloShape) -> bool:
    """True when ``v`` (a value of ``shape``) is the whole element at its own positions."""
    if shape.dims != element.dims or shape.dtype != element.dtype:
        return False
    if any(box != (0, n) for box, n in zip(v.box, element.dims, strict=True)):
        return False
    return all(d is None or d == i for i, d in enumerate(v.dims))


class _Walker:
    """Abstract values of a body's instructions, for one element of the state."""

    def __init__(self, module: HloModule, body: HloComputation, state: HloInstruction, index: int,
                 element: HloShape) -> None:
        self.m, self.body, self.state, self.index, self.element = module, body, state, index, element
        self.joins: list[tuple[str, HloInstruction]] = []
        """(body-level op, concatenate inside it) for every concatenation that joins pieces."""
        self._top = ""

    def run(self) -> dict[str, Value]:
        env: dict[str, Value] = {}
        for inst in self.body.instructions:
            self._top = inst.name
            env[inst.name] = self._eval(inst, env, {}, top=True)
        return env

    def _computation(self, comp: HloComputation, args: list[Value]) -> Value:
        env: dict[str, Value] = {}
        for inst in comp.instructions:
            env[inst.name] = self._eval(inst, env, {i: a for i, a in enumerate(args)}, top=False)
        return env.get(comp.root.name)

    def _eval(self, inst: HloInstruction, env: dict[str, Value], params: dict[int, Value], *,
              top: bool) -> Value:
        if inst.opcode == "parameter":
            return params.get(inst.parameter_number or 0) if not top else None
        args = [env.get(o) for o in inst.operands]
        if inst.opcode == "get-tuple-element":
            k = int(inst.attribute("index", "-1") or -1)
            if top and inst.operands and inst.operands[0] == self.state.name:
                if k != self.index:
                    return None
                n = len(self.element.dims)
                return View(tuple((0, d) for d in self.element.dims), tuple(range(n)), 0)
            src = args[0] if args else None
            return src.items[k] if isinstance(src, ViewTuple) and 0 <= k < len(src.items) else None
        if inst.opcode == "tuple":
            return ViewTuple(tuple(a if not isinstance(a, ViewTuple) else None for a in args)) \
                if any(a is not None for a in args) else None
        if not any(a is not None for a in args):
            return None
        value = self._transfer(inst, args)
        if top and isinstance(value, View):
            value = View(value.box, value.dims, value.differ, value.ops | {inst.name}, value.cut)
        elif top and isinstance(value, ViewTuple):
            value = ViewTuple(tuple(View(v.box, v.dims, v.differ, v.ops | {inst.name}, v.cut)
                                 if isinstance(v, View) else v for v in value.items))
        return value

    def _transfer(self, inst: HloInstruction, args: list[Value]) -> Value:
        op = inst.opcode
        if op == "fusion":
            body = self.m.fusion_body(inst)
            return self._computation(body, args) if body is not None else None
        first = args[0] if args else None
        if op == "concatenate":
            return self._concatenate(inst, args)
        if op == "dynamic-update-slice":
            return self._update(inst, args)
        if not isinstance(first, View):
            return None
        src = self.m.operands_of(inst)[0].shape if self.m.operands_of(inst) else None
        if src is None:
            return None
        if op == "copy":
            return first
        if op == "convert":
            return first if _exact(inst.shape.dtype, self.element.dtype) else None
        if op in ("bitcast", "reshape"):
            dims = _regroup(src, inst.shape, first.dims, physical=op == "bitcast")
            return None if dims is None else View(first.box, dims, first.differ, first.ops, first.cut)
        if op == "transpose":
            perm = _ints(inst.attribute("dimensions"))
            if len(perm) != len(first.dims):
                return None
            return View(first.box, tuple(first.dims[p] for p in perm), first.differ, first.ops, first.cut)
        if op == "slice":
            spans = _SLICE.findall(inst.attribute("slice"))
            if any(s not in ("", "1") for _, _, s in spans):
                return None  # a strided slice keeps every other position: not a box
            return self._narrow(first, src, [(int(a), int(b)) for a, b, _ in spans])
        if op == "dynamic-slice":
            starts = [self._constant(o, inst.computation) for o in inst.operands[1:]]
            sizes = _ints(inst.attribute("dynamic_slice_sizes"))
            if any(s is None for s in starts) or len(sizes) != len(src.dims):
                return None  # a position known only at run time
            bounds = []
            for s, size, n in zip(starts, sizes, src.dims, strict=False):
                start = min(max(int(s or 0), 0), n - size)  # XLA clamps the start into the operand
                bounds.append((start, start + size))
            return self._narrow(first, src, bounds)
        return None

    def _narrow(self, v: View, src: HloShape, bounds: list[tuple[int, int]]) -> View | None:
        if len(bounds) != len(src.dims):
            return None
        box = list(v.box)
        for i, (a, b) in enumerate(bounds):
            e = v.dims[i]
            if e is None:
                if (a, b) != (0, 1):
                    return None
                continue
            start = box[e][0]
            box[e] = (start + a, start + b)
        full = all(bx == (0, n) for bx, n in zip(box, self.element.dims, strict=True))
        return View(tuple(box), v.dims, v.differ, v.ops, v.cut or not full)

    def _concatenate(self, inst: HloInstruction, args: list[Value]) -> Value:
        dims_attr = _ints(inst.attribute("dimensions"))
        operands = self.m.operands_of(inst)
        if len(dims_attr) != 1 or len(operands) != len(args):
            return None
        d = dims_attr[0]
        views = [(i, a) for i, a in enumerate(args) if isinstance(a, View)]
        if not views:
            return None
        e = next((a.dims[d] for _, a in views if a.dims[d] is not None), None)
        if e is None:  # pieces of size 1 stacked along a new axis: the dimension where their boxes differ
            if len(views) < 2:
                return None
            differ_dims = {k for k in range(len(self.element.dims))
                           if len({a.box[k] for _, a in views}) > 1}
            if len(differ_dims) != 1:
                return None
            e = differ_dims.pop()
        offsets, at = [], 0
        for o in operands:
            offsets.append(at)
            at += o.shape.dims[d] if d < len(o.shape.dims) else 0
        i0, v0 = views[0]
        base = v0.box[e][0] - offsets[i0]
        if base < 0 or base + at > self.element.dims[e]:
            return None
        differ, ops, cut = 0, frozenset[str](), True
        for i, a in enumerate(args):
            if not isinstance(a, View):
                differ += operands[i].shape.num_elements
                continue
            if a.dims[d] not in (None, e) or a.box[e][0] != base + offsets[i]:
                return None
            if any(a.box[k] != v0.box[k] for k in range(len(a.box)) if k != e):
                return None
            if any(x != y for j, (x, y) in enumerate(zip(a.dims, v0.dims, strict=True))
                   if j != d and x is not None and y is not None):
                return None
            differ += a.differ
            ops |= a.ops
        box = list(v0.box)
        box[e] = (base, base + at)
        dims = list(v0.dims)
        dims[d] = e
        self.joins.append((self._top, inst))
        return View(tuple(box), tuple(dims), differ, ops, cut)

    def _update(self, inst: HloInstruction, args: list[Value]) -> Value:
        base, update = (args + [None, None])[:2]
        operands = self.m.operands_of(inst)
        if not isinstance(base, View) or len(operands) < 2:
            return None
        starts = [self._constant(o, inst.computation) for o in inst.operands[2:]]
        differ = operands[1].shape.num_elements
        ops = base.ops
        if isinstance(update, View) and all(s is not None for s in starts):
            expected = list(base.box)
            same = True
            for i, (s, n) in enumerate(zip(starts, operands[1].shape.dims, strict=False)):
                e = base.dims[i]
                if e is None:
                    same = same and s == 0
                    continue
                expected[e] = (base.box[e][0] + int(s or 0), base.box[e][0] + int(s or 0) + n)
            if same and tuple(expected) == update.box:
                # The element's own values written back where they came from: only their updates differ.
                differ, ops = update.differ, ops | update.ops
        return View(base.box, base.dims, base.differ + differ, ops, base.cut)

    def _constant(self, name: str, computation: str) -> int | None:
        inst = self.m.instruction(name, computation)
        if inst is None or inst.opcode != "constant" or inst.shape.dims:
            return None
        match = _CONSTANT.search(inst.raw)
        return int(match.group(1)) if match else None


def _exact(dst: str, element: str) -> bool:
    """A convert to ``dst`` keeps every value of an element of type ``element`` (bf16 -> f32 -> bf16)."""
    if dst == element:
        return True
    if (dst in FLOAT_DTYPES) != (element in FLOAT_DTYPES) or {dst, element} == {"f16", "bf16"}:
        return False
    if element[0] in "su" and dst[0] != element[0]:
        return dst[0] == "s" and DTYPE_BITS.get(dst, 0) > DTYPE_BITS.get(element, 64)  # u8 -> s16
    return DTYPE_BITS.get(dst, 0) >= DTYPE_BITS.get(element, 64)


def _ints(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"-?\d+", text)]


def _regroup(src: HloShape, dst: HloShape, dims: tuple[int | None, ...], *,
             physical: bool) -> tuple[int | None, ...] | None:
    """The element dimensions of ``dst``'s dimensions after a bitcast or reshape of ``src``, or None
    when the change merges or splits dimensions (their positions would no longer be boxes)."""
    def order(shape: HloShape) -> list[int]:
        n = len(shape.dims)
        m2m = shape.minor_to_major
        return list(reversed(m2m)) if physical and len(m2m) == n else list(range(n))

    src_big = [(src.dims[i], dims[i]) for i in order(src) if src.dims[i] != 1]
    dst_big = [i for i in order(dst) if dst.dims[i] != 1]
    if [s for s, _ in src_big] != [dst.dims[i] for i in dst_big]:
        return None
    out: list[int | None] = [None] * len(dst.dims)
    for i, (_, e) in zip(dst_big, src_big, strict=True):
        out[i] = e
    return tuple(out)
