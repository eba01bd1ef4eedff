"""What an HLO op does, in one word: its category (convert, copy, reduce, matmul, ...).

Read from the opcode and, for a fusion, the opcodes in its body; without HLO, from the op's name.
"""

from __future__ import annotations

import re

from hlo_doctor.hlo import HloInstruction, HloModule, fused_opcodes, is_convert_only

__all__ = ["CATEGORIES", "categorize", "categorize_name", "categorize_opcodes"]

CATEGORIES: tuple[str, ...] = ("convert", "copy", "reduce", "matmul", "elementwise", "data-movement",
                               "collective", "custom-call", "other")

_COLLECTIVES = frozenset({
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
    "all-reduce-start", "all-reduce-done", "all-gather-start", "all-gather-done",
    "collective-permute-start", "collective-permute-done", "send", "recv", "send-done", "recv-done",
    "collective-broadcast", "ragged-all-to-all",
})
_DATA_MOVEMENT = frozenset({
    "transpose", "broadcast", "slice", "concatenate", "dynamic-update-slice", "dynamic-slice",
    "gather", "scatter", "pad", "reshape", "reverse", "iota", "copy-start", "copy-done",
})
_REDUCTIONS = frozenset({"reduce", "reduce-window", "reduce-precision", "select-and-scatter", "sort"})
_MATMUL = frozenset({"dot", "convolution", "ragged-dot"})
_ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "atan2",
    "abs", "negate", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt",
    "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "floor", "ceil", "round-nearest-afz",
    "round-nearest-even", "sign", "not", "and", "or", "xor", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "compare", "select", "clamp", "is-finite", "erf", "real", "imag",
    "complex", "popcnt", "count-leading-zeros", "bitcast-convert", "stochastic-convert", "map",
    "convert",
})


def categorize(module: HloModule | None, inst: HloInstruction | None, op_name: str = "") -> str:
    """The category of an op, from its opcode and (for a fusion) the opcodes in its body.

    Without HLO (a trace without modules) the op name is used (``wrapped_convert``, ``copy.2``).
    """
    if inst is None or module is None:
        return categorize_name(op_name)
    opcode = inst.opcode
    if opcode == "fusion":
        ops = [o for o in fused_opcodes(module, inst)]
        if is_convert_only(module, inst):
            return "convert"
        return categorize_opcodes(set(ops)) if ops else "other"
    if opcode == "convert":
        return "convert"
    return categorize_opcodes({opcode})


def categorize_opcodes(ops: set[str]) -> str:
    """The category of an op that runs these opcodes."""
    if ops & _COLLECTIVES:
        return "collective"
    if ops & _MATMUL:
        return "matmul"
    if ops & _REDUCTIONS:
        return "reduce"
    if "custom-call" in ops:
        return "custom-call"
    if ops <= {"copy"}:
        return "copy"
    if ops <= {"convert"}:
        return "convert"
    if ops <= (_DATA_MOVEMENT | {"copy"}):
        return "data-movement"
    if ops & (_ELEMENTWISE - {"convert"}):
        return "elementwise"
    if ops <= (_DATA_MOVEMENT | {"copy", "convert"}):
        return "data-movement"
    return "other"


def categorize_name(name: str) -> str:
    """The category of an op known only by its name (``wrapped_convert``, ``copy.2``)."""
    base = re.sub(r"\.\d+$", "", name).lower()
    for words, category in (
        (("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective", "send", "recv"),
         "collective"),
        (("dot", "matmul", "convolution", "conv", "gemm", "cublas"), "matmul"),
        (("argmax", "argmin", "reduce"), "reduce"),
        (("custom-call", "custom_call"), "custom-call"),
        (("convert",), "convert"),
        (("copy",), "copy"),
        (("transpose", "broadcast", "slice", "concatenate", "gather", "scatter", "pad"), "data-movement"),
        (("add", "multiply", "subtract", "divide", "exponential", "select", "compare", "maximum", "loop"),
         "elementwise"),
    ):
        # Multi-word names match as substrings, single words as whole tokens ("conv" is not
        # "convert").
        tokens = set(re.split(r"[_.\-]", base))
        if any((w in base) if "-" in w else (w in tokens) for w in words):
            return category
    return "other"
