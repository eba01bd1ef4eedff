"""HD007: a value narrowed and widened straight back (f32 -> bf16 -> f32)."""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import is_convert_only
from hlo_doctor.hlo.analysis import dtype_shape, is_exact_widening
from hlo_doctor.hlo.origin import origin_of
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity

_ROUND_TRIP = """\
HloModule jit_round_trip, entry_computation_layout={(f32[8,1024]{1,0})->f32[8,1024]{1,0}}

%fused_computation (param_0.1: f32[8,1024]) -> f32[8,1024] {
  %param_0.1 = f32[8,1024]{1,0} parameter(0)
  %convert_element_type.1 = bf16[8,1024]{1,0} convert(%param_0.1), metadata={op_name="jit(round_trip)/convert_element_type" source_file="model.py" source_line=12}
  ROOT %convert_element_type.0 = f32[8,1024]{1,0} convert(%convert_element_type.1), metadata={op_name="jit(round_trip)/convert_element_type" source_file="model.py" source_line=13}
}

ENTRY %main.1 (v.1: f32[8,1024]) -> f32[8,1024] {
  %v.1 = f32[8,1024]{1,0} parameter(0)
  ROOT %convert_convert_fusion = f32[8,1024]{1,0} fusion(%v.1), kind=kLoop, calls=%fused_computation
}
"""

# XLA:CPU's own bf16 reducer: converts without metadata, not the program's.
_XLA_REDUCER = """\
HloModule jit_greedy, entry_computation_layout={(f32[])->f32[]}

ENTRY %main.1 (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %convert.18 = bf16[] convert(%a)
  ROOT %convert.21 = f32[] convert(%convert.18)
}
"""

# bf16 rounding of a matmul result inside the activation's fusion: intended numerics, not waste.
_FUSED_ROUNDING = """\
HloModule jit_mlp, entry_computation_layout={(f32[8,1024]{1,0})->f32[8,1024]{1,0}}

%fused_computation (param_0.1: f32[8,1024]) -> f32[8,1024] {
  %param_0.1 = f32[8,1024]{1,0} parameter(0)
  %convert_element_type.9 = bf16[8,1024]{1,0} convert(%param_0.1), metadata={op_name="jit(mlp)/convert_element_type"}
  %convert_element_type.8 = f32[8,1024]{1,0} convert(%convert_element_type.9), metadata={op_name="jit(mlp)/convert_element_type"}
  ROOT %tanh.0 = f32[8,1024]{1,0} tanh(%convert_element_type.8)
}

ENTRY %main.1 (v.1: f32[8,1024]) -> f32[8,1024] {
  %v.1 = f32[8,1024]{1,0} parameter(0)
  ROOT %multiply_convert_fusion = f32[8,1024]{1,0} fusion(%v.1), kind=kLoop, calls=%fused_computation
}
"""

# Narrowed for a reason: the bf16 value is also returned.
_STORED_NARROW = """\
HloModule jit_store, entry_computation_layout={(f32[8,1024]{1,0})->(bf16[8,1024]{1,0}, f32[8,1024]{1,0})}

ENTRY %main.1 (v.1: f32[8,1024]) -> (bf16[8,1024], f32[8,1024]) {
  %v.1 = f32[8,1024]{1,0} parameter(0)
  %n = bf16[8,1024]{1,0} convert(%v.1), metadata={op_name="jit(store)/convert_element_type"}
  %w = f32[8,1024]{1,0} convert(%n), metadata={op_name="jit(store)/convert_element_type"}
  ROOT %t = (bf16[8,1024]{1,0}, f32[8,1024]{1,0}) tuple(%n, %w)
}
"""


class PrecisionRoundTrip(Rule):
    """A value narrowed and widened straight back: ``f32 -> bf16 -> f32``.

    What it flags:
        A program step (an entry-level op: a bare convert or a fusion of converts only) that
        narrows a value and widens it straight back to the same dtype (``f32 -> bf16 -> f32``,
        ``f32 -> f16 -> f32``), both converts written in the program (their HLO metadata names
        ``convert_element_type``) and the narrow value used nowhere else. Converts that XLA
        inserts itself (no metadata) are not flagged, and neither is a round trip fused into
        real work (``gelu(dot(x, w).astype(bf16).astype(f32))``): there it is a rounding step
        in registers, usually there on purpose to match bf16 storage numerics.
    Why it costs:
        Two converts of work for a value that ends up in the type it started in, minus the
        precision the narrow type dropped. Usually a leftover of mixed-precision plumbing (a cast
        to the compute dtype followed by a cast back to the accumulation dtype). When the
        rounding is intended (emulating bf16 storage), say so in a comment and ignore the rule.
    Example:
        ``x.astype(jnp.bfloat16).astype(jnp.float32)``.
    Fix:
        Drop both converts, or keep the value in the narrow type if that is what is stored; the
        message names the line. When the converts are written inside a framework (no frame of code
        you edit in their stack), the message says so: hand it the value in the narrow type, or
        report it.
    """

    code = "HD007"
    name = "convert.precision-round-trip"
    severity = Severity.LOW
    requires = ("hlo",)
    fix = ""

    VALID = (
        Example(hlo=(_XLA_REDUCER,), note="XLA's own reducer converts"),
        Example(hlo=(_FUSED_ROUNDING,), note="rounding fused into real work"),
        Example(hlo=(_STORED_NARROW,), note="the narrow value is also returned"),
    )
    INVALID = (
        Example(hlo=(_ROUND_TRIP,), expect=("HD007 convert_convert_fusion",), note="astype(bf16).astype(f32)"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        seen: set[tuple[str, str]] = set()
        for m in ctx.modules:
            for outer in m.instructions():
                if outer.opcode != "convert" or "convert_element_type" not in outer.op_name:
                    continue
                ops = m.operands_of(outer)
                if len(ops) != 1 or ops[0].opcode != "convert" or "convert_element_type" not in ops[0].op_name:
                    continue
                narrow = ops[0]
                src = m.operands_of(narrow)
                if len(src) != 1 or src[0].dtype != outer.dtype or not is_exact_widening(narrow.dtype, outer.dtype):
                    continue
                if len(m.users_of(narrow)) != 1:
                    continue
                op = ctx.entry_op(m, outer)
                # Fused into real work, a round trip is a rounding step done in registers, often on
                # purpose (matching bf16 storage numerics): only a program step that does nothing
                # but the round trip is flagged.
                if not (op is outer or is_convert_only(m, op)) or (m.name, op.name) in seen:
                    continue
                seen.add((m.name, op.name))
                origin = origin_of(m, narrow)
                if origin.framework:
                    todo = (f"they are written {origin.where()}: hand it the value in {narrow.dtype}, or report "
                            f"it upstream")
                else:
                    todo = "drop both converts" + (f" ({origin.where()})" if origin.line else "")
                yield ctx.finding(
                    self, m, outer,
                    f"{dtype_shape(src[0].shape)} is narrowed to {narrow.dtype} by {narrow.name} and widened "
                    f"back by {outer.name}: two converts and lost precision for a value of the same type; {todo}",
                    recoverable_fraction=1.0, source_inst=narrow,
                    evidence=(narrow.raw, outer.raw),
                    extra=(("narrow_dtype", narrow.dtype), ("dtype", outer.dtype)),
                )
