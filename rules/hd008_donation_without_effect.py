"""HD008: a donated parameter that is still copied into the output."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hlo_doctor.hlo.analysis import dtype_shape
from hlo_doctor.hlo.origin import program_framework
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes

_DONOR = re.compile(r"buffer_donor=\{([^}]*)\}")
_DONOR_PARAM = re.compile(r"\((\d+)")

_RETURNED_TWICE = """\
HloModule jit_twice, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }, entry_computation_layout={(f32[8,1024]{1,0})->(f32[8,1024]{1,0}, f32[8,1024]{1,0})}

ENTRY %main.1 (v.1: f32[8,1024]) -> (f32[8,1024], f32[8,1024]) {
  %v.1 = f32[8,1024]{1,0} parameter(0), metadata={op_name="v"}
  %copy.2 = f32[8,1024]{1,0} copy(%v.1)
  ROOT %tuple.2 = (f32[8,1024]{1,0}, f32[8,1024]{1,0}) tuple(%v.1, %copy.2)
}
"""

_DONATED_CLEAN = """\
HloModule jit_update, is_scheduled=true, input_output_alias={ {}: (0, {}, may-alias) }, entry_computation_layout={(f32[8,1024]{1,0})->f32[8,1024]{1,0}}

%fused_computation (param_0: f32[8,1024]) -> f32[8,1024] {
  %param_0 = f32[8,1024]{1,0} parameter(0)
  %c = f32[] constant(2)
  %b = f32[8,1024]{1,0} broadcast(%c), dimensions={}
  ROOT %m = f32[8,1024]{1,0} multiply(%param_0, %b)
}

ENTRY %main.1 (v.1: f32[8,1024]) -> f32[8,1024] {
  %v.1 = f32[8,1024]{1,0} parameter(0)
  ROOT %f = f32[8,1024]{1,0} fusion(%v.1), kind=kLoop, calls=%fused_computation
}
"""

_NOT_DONATED = """\
HloModule jit_identity, entry_computation_layout={(f32[64,64]{1,0})->f32[64,64]{1,0}}

ENTRY %main.1 (x.1: f32[64,64]) -> f32[64,64] {
  %x.1 = f32[64,64]{1,0} parameter(0)
  ROOT %copy.1 = f32[64,64]{1,0} copy(%x.1)
}
"""


class DonationWithoutEffect(Rule):
    """A donated parameter (``donate_argnums``) that the program still copies into its output.

    What it flags:
        A ``copy`` of an entry parameter, same layout on both sides, that is part of the output
        although the parameter is donated (it appears in the module's ``input_output_alias`` or
        ``buffer_donor``). Typically the function returns the donated array twice, or returns it
        next to an output that already took its buffer. (Without donation, HD002 reports the copy.)
        Copies under 4 KiB are ignored.
    Why it costs:
        Donation was asked for to avoid exactly this copy: the caller gave its buffer away, and
        the program still reads and writes the whole tensor once more per call.
    Example:
        ``jax.jit(lambda s: (s, s), donate_argnums=0)``: output 0 aliases the parameter, output 1
        is a copy.
    Fix:
        Return the donated array once; let the caller reuse the returned array instead of asking
        for a second one. JAX's "Some donated buffers were not usable" warning names the others.
        A program traced inside a framework (no frame of code you edit in its stack) returns what
        the framework returns: the message says so.
    """

    code = "HD008"
    name = "donation.without-effect"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = ""

    VALID = (
        Example(hlo=(_DONATED_CLEAN,), note="donated and updated in place"),
        Example(hlo=(_NOT_DONATED,), note="not donated: HD002's case"),
    )
    INVALID = (
        Example(hlo=(_RETURNED_TWICE,), expect=("HD008 copy.2",), note="a donated array returned twice"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            header = m.text.splitlines()[0] if m.text else ""
            donors = set(m.aliased_parameters())
            dm = _DONOR.search(header)
            if dm:
                donors |= {int(p) for p in _DONOR_PARAM.findall(dm.group(1))}
            if not donors:
                continue
            for inst in m.entry.instructions:
                if inst.opcode != "copy" or not m.is_live_out(inst) or inst.shape.nbytes < 4096:
                    continue
                ops = m.operands_of(inst)
                if len(ops) != 1 or ops[0].opcode != "parameter" or ops[0].computation != m.entry_name:
                    continue
                param = ops[0]
                if param.parameter_number not in donors or param.shape.layout != inst.shape.layout:
                    continue
                outputs = ", ".join(str(i) for i in m.output_indices_of(inst))
                framework = program_framework(m)
                todo = (f"program {m.name} is traced inside {framework} (no frame of code you edit in its stack): "
                        f"what it returns is {framework}'s" if framework else
                        "return the donated array once and reuse the returned one")
                yield ctx.finding(
                    self, m, inst,
                    f"parameter {param.parameter_number} ({param.name}, {dtype_shape(param.shape)}) is donated "
                    f"but {inst.name} still copies it ({fmt_bytes(inst.shape.nbytes)}) into output {outputs}; {todo}",
                    recoverable_fraction=1.0, evidence=(param.raw, inst.raw, m.entry.root.raw),
                    extra=(("parameter", param.parameter_number),),
                )
