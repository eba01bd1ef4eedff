"""HLO shapes: element types, their sizes, and the shape parser (arrays and nested tuples)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Bytes per element. Sub-byte types are rounded up per element: a conservative read estimate.
DTYPE_BYTES: dict[str, float] = {
    "pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
    "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e4m3b11fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3fnuz": 1,
    "f8e3m4": 1, "f8e8m0fnu": 1, "f4e2m1fn": 0.5, "token": 0,
}
FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4"})


@dataclass(frozen=True, slots=True)
class HloShape:
    """An HLO shape: an array ``f32[64,256000]{1,0}`` or a tuple of shapes."""

    dtype: str
    """Element type (``f32``, ``bf16``...), or ``tuple``."""
    dims: tuple[int, ...] = ()
    layout: str = ""
    """Minor-to-major layout as printed, without braces (``1,0``); empty when not printed."""
    elements: tuple[HloShape, ...] = ()
    """The element shapes of a tuple."""

    @property
    def is_tuple(self) -> bool:
        return self.dtype == "tuple"

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the whole value (sum over tuple elements)."""
        if self.is_tuple:
            return sum(e.nbytes for e in self.elements)
        return int(self.num_elements * DTYPE_BYTES.get(self.dtype, 4))

    def text(self, with_layout: bool = True) -> str:
        """The shape as HLO writes it."""
        if self.is_tuple:
            return "(" + ", ".join(e.text(with_layout) for e in self.elements) + ")"
        s = f"{self.dtype}[{','.join(str(d) for d in self.dims)}]"
        if with_layout and self.layout:
            s += "{" + self.layout + "}"
        return s

    def __str__(self) -> str:
        return self.text()


_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:\{([^}]*)\})?")


def parse_shape(text: str) -> HloShape:
    """Parse one HLO shape (array or nested tuple)."""
    shape, rest = _parse_shape_prefix(text.strip())
    if rest.strip():
        raise ValueError(f"trailing text after shape: {text!r}")
    return shape


def _parse_shape_prefix(text: str) -> tuple[HloShape, str]:
    text = text.lstrip()
    if text.startswith("("):
        elements: list[HloShape] = []
        rest = text[1:].lstrip()
        if rest.startswith(")"):
            return HloShape("tuple"), rest[1:]
        while True:
            element, rest = _parse_shape_prefix(rest)
            elements.append(element)
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:]
                continue
            if rest.startswith(")"):
                return HloShape("tuple", elements=tuple(elements)), rest[1:]
            raise ValueError(f"malformed tuple shape near {rest[:40]!r}")
    m = _ARRAY_SHAPE.match(text)
    if not m:
        raise ValueError(f"not an HLO shape: {text[:40]!r}")
    dtype, dims_text, layout = m.group(1), m.group(2), m.group(3) or ""
    dims: list[int] = []
    for d in dims_text.split(","):
        d = d.strip().lstrip("<=")
        if d and d != "?":
            dims.append(int(d))
    # Layouts may carry tiling/memory-space suffixes (``{1,0:T(8,128)}``): keep the dims part.
    layout = layout.split(":")[0]
    return HloShape(dtype, tuple(dims), layout), text[m.end():]
