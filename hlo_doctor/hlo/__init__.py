"""HLO modules parsed into instructions.

Input is HLO text as XLA prints it: ``jax.jit(f).lower(...).compile().as_text()``, the modules stored
in a trace's metadata plane (converted with :func:`module_text_from_proto`), or the optimized HLO
files of an ``--xla_dump_to`` directory. The parser keeps what the rules need: name, opcode, shape,
dtype, layout, operands, users, root/parameter, fusion bodies and metadata (``op_name`` and the
source file:line, resolved through the module's stack-frame tables when XLA prints those).

``shape`` holds shapes and element types, ``module`` the data model, ``parse`` the text parser and
``proto`` the reading of serialized protos; this package re-exports their public names.
"""

from __future__ import annotations

from hlo_doctor.hlo.module import (
    PLUMBING_OPCODES,
    HloComputation,
    HloInstruction,
    HloModule,
    fused_opcodes,
    is_convert_only,
    operand_shapes,
    real_work,
)
from hlo_doctor.hlo.parse import parse_module, parse_modules
from hlo_doctor.hlo.proto import module_text_from_proto
from hlo_doctor.hlo.shape import (
    DTYPE_BITS,
    DTYPE_BYTES,
    FLOAT_DTYPES,
    HloShape,
    _parse_shape_prefix,
    parse_shape,
)
from hlo_doctor.hlo.text import _find_closing, _split_top_level

__all__ = [
    "DTYPE_BITS",
    "DTYPE_BYTES",
    "FLOAT_DTYPES",
    "PLUMBING_OPCODES",
    "HloComputation",
    "HloInstruction",
    "HloModule",
    "HloShape",
    "_find_closing",
    "_parse_shape_prefix",
    "_split_top_level",
    "fused_opcodes",
    "is_convert_only",
    "module_text_from_proto",
    "operand_shapes",
    "parse_module",
    "parse_modules",
    "parse_shape",
    "real_work",
]
