"""HLO shapes: element types, their sizes, and the shape parser (arrays, tuples, buffers)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hlo_doctor.hlo.text import _split_top_level

# Bits per element, by XLA's element type names. Sub-byte types (s1..s4, u1..u4, f4e2m1fn) are counted at
# their bit width: packed, as XLA stores them when the layout says so (``E(4)``) and as a byte estimate
# should count them. ``pred`` occupies a byte.
DTYPE_BITS: dict[str, int] = {
    "pred": 8, "s1": 1, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
    "u1": 1, "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f8e4m3fn": 8, "f8e5m2": 8, "f8e4m3": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8,
    "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 4, "token": 0, "opaque": 0,
}
# Bytes per element (a fraction for sub-byte types).
DTYPE_BYTES: dict[str, float] = {k: v / 8 for k, v in DTYPE_BITS.items()}
FLOAT_DTYPES = frozenset({
    "f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4", "f8e4m3b11fnuz",
    "f8e5m2fnuz", "f8e4m3fnuz", "f8e8m0fnu", "f4e2m1fn",
})

# Deeper tuples than this are refused: real programs nest a few levels, and the printers recurse.
MAX_TUPLE_DEPTH = 64

_MEMORY_SPACE = re.compile(r"(?<![A-Z])S\((\d+)\)")
_ELEMENT_SIZE = re.compile(r"(?<![A-Z])E\((\d+)\)")
_TILES = re.compile(r"T((?:\([\d,*]*\))+)")


@dataclass(frozen=True, slots=True)
class HloShape:
    """An HLO shape: an array ``f32[64,256000]{1,0}``, a tuple of shapes, or a buffer ``b(f32[8]{0})``."""

    dtype: str
    """Element type (``f32``, ``bf16``...), ``tuple``, or ``buffer``."""
    dims: tuple[int, ...] = ()
    """Sizes; the bound of a bounded dynamic dimension (``<=10``); -1 for an unbounded one (``?``)."""
    layout: str = ""
    """The layout as printed, without braces: minor-to-major, then after ``:`` tiles ``T(8,128)``,
    element size ``E(4)``, memory space ``S(1)``... (``1,0:T(8,128)S(1)``); empty when not printed."""
    elements: tuple[HloShape, ...] = ()
    """The element shapes of a tuple; the one shape a buffer holds."""
    dynamic: tuple[bool, ...] = ()
    """Per dimension, True when it is dynamic (``<=N`` or ``?``); empty when every dimension is static."""

    @property
    def is_tuple(self) -> bool:
        return self.dtype == "tuple"

    @property
    def is_buffer(self) -> bool:
        return self.dtype == "buffer"

    @property
    def is_dynamic(self) -> bool:
        return any(self.dynamic)

    @property
    def num_elements(self) -> int:
        """Elements of an array, at the bound of bounded dimensions; 0 when a dimension is unbounded."""
        n = 1
        for d in self.dims:
            n *= max(d, 0)
        return n

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        """The layout's dimension order (empty when no layout is printed)."""
        order = self.layout.split(":", 1)[0]
        return tuple(int(d) for d in order.split(",") if d.strip())

    @property
    def layout_attributes(self) -> str:
        """What the layout says after the dimension order (``T(8,128)S(1)``), or empty."""
        return self.layout.split(":", 1)[1] if ":" in self.layout else ""

    @property
    def memory_space(self) -> int:
        """The layout's memory space ``S(n)``: 0 (default device memory) when not printed."""
        m = _MEMORY_SPACE.search(self.layout_attributes)
        return int(m.group(1)) if m else 0

    @property
    def tiles(self) -> str:
        """The layout's tiling as printed after ``T`` (``(8,128)(2,1)``), or empty."""
        m = _TILES.search(self.layout_attributes)
        return m.group(1) if m else ""

    @property
    def element_bits(self) -> int:
        """Bits per element: the layout's ``E(n)`` when printed, else the element type's width."""
        m = _ELEMENT_SIZE.search(self.layout_attributes)
        return int(m.group(1)) if m else DTYPE_BITS.get(self.dtype, 32)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole value (sum over tuple elements), sub-byte elements packed."""
        if self.is_tuple or self.is_buffer:
            return sum(e.nbytes for e in self.elements)
        return (self.num_elements * self.element_bits + 7) // 8

    def text(self, with_layout: bool = True) -> str:
        """The shape as HLO writes it."""
        if self.is_tuple:
            return "(" + ", ".join(e.text(with_layout) for e in self.elements) + ")"
        if self.is_buffer:
            return "b(" + "".join(e.text(with_layout) for e in self.elements) + ")"
        dims = [
            ("?" if d < 0 else f"<={d}") if self.dynamic and self.dynamic[i] else str(d)
            for i, d in enumerate(self.dims)
        ]
        s = f"{self.dtype}[{','.join(dims)}]"
        if with_layout and self.layout:
            s += "{" + self.layout + "}"
        return s

    def __str__(self) -> str:
        return self.text()


_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:\{([^}]*)\})?")


def parse_shape(text: str) -> HloShape:
    """Parse one HLO shape (array, nested tuple or buffer)."""
    shape, rest = _parse_shape_prefix(text.strip())
    if rest.strip():
        raise ValueError(f"trailing text after shape: {text!r}")
    return shape


# Array shapes by their text: a module prints the same few shapes on most of its lines, and a shape is
# immutable, so one value serves them all. Bounded: past the bound, new texts are parsed, not kept.
_ARRAYS: dict[str, HloShape] = {}
_ARRAYS_MAX = 16384


def _array(m: re.Match[str]) -> HloShape:
    dtype, dims_text, layout = m.group(1), m.group(2), m.group(3) or ""
    dims: list[int] = []
    dynamic: list[bool] = []
    for d in dims_text.split(","):
        d = d.strip()
        if not d:
            continue
        if d == "?":
            dims.append(-1)
            dynamic.append(True)
        elif d.startswith("<="):
            dims.append(int(d[2:]))
            dynamic.append(True)
        else:
            dims.append(int(d))
            dynamic.append(False)
    return HloShape(dtype, tuple(dims), layout, dynamic=tuple(dynamic) if any(dynamic) else ())


def _parse_shape_prefix(text: str) -> tuple[HloShape, str]:
    """Parse the shape at the start of ``text``; return it and the rest of the text.

    Iterative (an explicit stack of open tuples and buffers), so that nesting cannot exhaust Python's
    stack; deeper than ``MAX_TUPLE_DEPTH`` is refused.
    """
    stack: list[tuple[str, list[HloShape]]] = []
    pos = 0
    n = len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if text.startswith("(", pos) or text.startswith("b(", pos):
            kind = "tuple" if text[pos] == "(" else "buffer"
            pos += 1 if kind == "tuple" else 2
            stack.append((kind, []))
            if len(stack) > MAX_TUPLE_DEPTH:
                raise ValueError(f"shape nests deeper than {MAX_TUPLE_DEPTH} tuples")
            while pos < n and text[pos].isspace():
                pos += 1
            if kind == "buffer" or not text.startswith(")", pos):
                continue
            pos += 1
            stack.pop()
            value = HloShape("tuple")
        else:
            m = _ARRAY_SHAPE.match(text, pos)
            if not m:
                raise ValueError(f"not an HLO shape: {text[pos:pos + 40]!r}")
            key = m.group()
            cached = _ARRAYS.get(key)
            if cached is None:
                cached = _array(m)
                if len(_ARRAYS) < _ARRAYS_MAX:
                    _ARRAYS[key] = cached
            value = cached
            pos = m.end()
        # Close every tuple/buffer this value completes; stop at a comma (next element) or the end.
        while True:
            if not stack:
                return value, text[pos:]
            kind, elements = stack[-1]
            elements.append(value)
            while pos < n and text[pos].isspace():
                pos += 1
            if kind == "tuple" and text.startswith(",", pos):
                pos += 1
                break
            if not text.startswith(")", pos):
                raise ValueError(f"malformed {kind} shape near {text[pos:pos + 40]!r}")
            pos += 1
            stack.pop()
            value = HloShape(kind, elements=tuple(elements))


SHAPE_LIMIT = 100
"""Characters of a shape that people's tables and lines show (machine formats keep it whole)."""


def fmt_shape(shape: str, limit: int = SHAPE_LIMIT) -> str:
    """A shape for people: whole up to ``limit`` characters; a longer tuple keeps its first elements
    and says how many it leaves out (a ``while`` carrying 70 buffers: ``(s32[8,16]{1,0}, ..., +68
    more)``); anything else longer is cut with an ellipsis. JSON, CSV and SARIF keep the shape whole."""
    if len(shape) <= limit:
        return shape
    if shape.startswith("(") and shape.endswith(")"):
        elements = _split_top_level(shape[1:-1])
        kept: list[str] = []
        for e in elements:
            if len(", ".join([*kept, e])) + 16 > limit and kept:
                break
            kept.append(e)
        rest = len(elements) - len(kept)
        return f"({', '.join(kept)}, ... +{rest} more)" if rest else shape
    return shape[: limit - 3] + "..."
