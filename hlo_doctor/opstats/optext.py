"""Shapes from an op's HLO text as device traces and xprof print it (no module needed)."""

from __future__ import annotations

import re

# The shape/bracket helpers are the parser's own; op texts in device traces use the same syntax.
from hlo_doctor.hlo import HloShape, _find_closing, _parse_shape_prefix, _split_top_level


def parse_op_text(text: str) -> tuple[str, HloShape | None, list[HloShape]]:
    """(opcode, result shape, operand shapes) from one op's HLO text; ``("", None, [])`` if unreadable.

    Device traces and xprof print ops as ``%fusion.1 = bf16[8,128]{1,0} fusion(bf16[8,128]{1,0} %p0)``:
    operand shapes are printed inline, so bytes can be estimated without the module.
    """
    if "=" not in text:
        return "", None, []
    rest = text.split("=", 1)[1]
    try:
        shape, rest = _parse_shape_prefix(rest)
    except ValueError:
        return "", None, []
    m = re.match(r"\s*([a-z][\w\-]*)\(", rest)
    if not m:
        return "", shape, []
    opcode = m.group(1)
    operands: list[HloShape] = []
    try:
        close = _find_closing(rest, m.end() - 1)
    except ValueError:
        return opcode, shape, []
    for token in _split_top_level(rest[m.end():close]):
        try:
            operand, _ = _parse_shape_prefix(token)
        except ValueError:
            continue  # an operand printed without its shape
        operands.append(operand)
    return opcode, shape, operands
