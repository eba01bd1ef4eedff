"""HD014: per-call work whose inputs are the same on every call (constants, weights): it could be done once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from hlo_doctor.hlo import HloInstruction, HloModule
from hlo_doctor.hlo.analysis import dtype_shape, key_instruction
from hlo_doctor.hlo.frames import Frame, framework_of
from hlo_doctor.hlo.group_work import does_work, draws_random, group_work, inside, uniform_constants
from hlo_doctor.hlo.invariance import InvariantGroup, dependence, invariant_groups
from hlo_doctor.hlo.weights import WeightUse, weight_parameters
from hlo_doctor.lint import Context, Example, Finding, Rule, Severity, fmt_bytes, stage_of
from hlo_doctor.lint.op_union import overlap_ratio
from hlo_doctor.lint.parts import bounded

# Below this the invariant value is a scalar, a norm's scale or a small mask, not work worth a line.
MIN_BYTES = 64 * 1024
# With op stats: below this share of the step (the info band) work is left out.
MIN_SHARE_PCT = 0.05
# Building blocks of a constant table that are not work of their own (a mask, positions).
_CHEAP_FROM_CONSTANTS = frozenset({"convert", "iota", "concatenate", "transpose", "compare", "select"})
# An initialiser's name: init, init_cache, init_weights, _init_weights, initialize... (not __init__).
_INIT = re.compile(r"^_?init(?:_\w+)?$|^initiali[sz]e\w*$")

_WIDENED_EACH_CALL = """\
HloModule jit_decode, is_scheduled=true, entry_computation_layout={(bf16[1024,64]{1,0}, f32[4,64]{1,0})->f32[4,1024]{1,0}}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true}

%fused_computation (param_0: f32[4,64], param_1: f32[1024,64]) -> f32[4,1024] {
  %param_0 = f32[4,64]{1,0} parameter(0)
  %param_1 = f32[1024,64]{1,0} parameter(1)
  ROOT %dot_general.0 = f32[4,1024]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={1}, metadata={op_name="jit(decode)/dot_general" stack_frame_id=4}
}

%wrapped_convert_computation (param_0.1: bf16[1024,64]) -> f32[1024,64] {
  %param_0.1 = bf16[1024,64]{1,0} parameter(0)
  ROOT %convert.2 = f32[1024,64]{1,0} convert(%param_0.1)
}

ENTRY %main.1 (emb.1: bf16[1024,64], x.1: f32[4,64]) -> f32[4,1024] {
  %emb.1 = bf16[1024,64]{1,0} parameter(0), metadata={op_name="emb"}
  %x.1 = f32[4,64]{1,0} parameter(1), metadata={op_name="x"}
  %wrapped_convert = f32[1024,64]{1,0} fusion(%emb.1), kind=kLoop, calls=%wrapped_convert_computation
  ROOT %ynn_fusion = f32[4,1024]{1,0} fusion(%x.1, %wrapped_convert), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(decode)/dot_general" stack_frame_id=4}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
}
"""

_ACTIVATION_WIDENED = """\
HloModule jit_project, is_scheduled=true, entry_computation_layout={(bf16[64,1024]{1,0}, f32[1024,256]{1,0})->f32[64,256]{1,0}}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true}

%fused_computation (param_0: f32[64,1024], param_1: f32[1024,256]) -> f32[64,256] {
  %param_0 = f32[64,1024]{1,0} parameter(0)
  %param_1 = f32[1024,256]{1,0} parameter(1)
  ROOT %dot_general.0 = f32[64,256]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(project)/dot_general" stack_frame_id=2}
}

%wrapped_convert_computation (param_0.1: bf16[64,1024]) -> f32[64,1024] {
  %param_0.1 = bf16[64,1024]{1,0} parameter(0)
  ROOT %convert_element_type.0 = f32[64,1024]{1,0} convert(%param_0.1), metadata={op_name="jit(project)/convert_element_type" stack_frame_id=2}
}

ENTRY %main.1 (x.1: bf16[64,1024], w.1: f32[1024,256]) -> f32[64,256] {
  %x.1 = bf16[64,1024]{1,0} parameter(0), metadata={op_name="x"}
  %w.1 = f32[1024,256]{1,0} parameter(1), metadata={op_name="w"}
  %wrapped_convert = f32[64,1024]{1,0} fusion(%x.1), kind=kLoop, calls=%wrapped_convert_computation, metadata={op_name="jit(project)/convert_element_type" stack_frame_id=2}
  ROOT %ynn_fusion = f32[64,256]{1,0} fusion(%wrapped_convert, %w.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(project)/dot_general" stack_frame_id=2}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
}
"""

_TABLE_EACH_CALL = """\
HloModule jit_positions, is_scheduled=true, entry_computation_layout={(f32[4,64]{1,0})->f32[4,1024]{1,0}}

%fused_computation (param_0: f32[4,64], param_1: f32[1024,64]) -> f32[4,1024] {
  %param_0 = f32[4,64]{1,0} parameter(0)
  %param_1 = f32[1024,64]{1,0} parameter(1)
  ROOT %dot_general.0 = f32[4,1024]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={1}, metadata={op_name="jit(positions)/dot_general" stack_frame_id=5}
}

%fused_computation.1 () -> f32[1024,64] {
  %iota.4 = f32[1024,64]{1,0} iota(), iota_dimension=1, metadata={op_name="jit(positions)/iota" stack_frame_id=2}
  %iota.3 = f32[1024,64]{1,0} iota(), iota_dimension=0, metadata={op_name="jit(positions)/iota" stack_frame_id=2}
  %constant.3 = f32[] constant(64), metadata={op_name="jit(positions)/reshape" stack_frame_id=2}
  %broadcast.1 = f32[1024,64]{1,0} broadcast(%constant.3), dimensions={}, metadata={op_name="jit(positions)/reshape" stack_frame_id=2}
  %multiply.1 = f32[1024,64]{1,0} multiply(%iota.3, %broadcast.1), metadata={op_name="jit(positions)/reshape" stack_frame_id=2}
  %add.1 = f32[1024,64]{1,0} add(%iota.4, %multiply.1), metadata={op_name="jit(positions)/reshape" stack_frame_id=2}
  %constant.2 = f32[] constant(0.01)
  %mul.1 = f32[1024,64]{1,0} broadcast(%constant.2), dimensions={}, metadata={op_name="jit(positions)/mul" stack_frame_id=2}
  %mul.0 = f32[1024,64]{1,0} multiply(%add.1, %mul.1), metadata={op_name="jit(positions)/mul" stack_frame_id=2}
  ROOT %sin.0 = f32[1024,64]{1,0} sine(%mul.0), metadata={op_name="jit(positions)/sin" stack_frame_id=3}
}

ENTRY %main.1 (x.1: f32[4,64]) -> f32[4,1024] {
  %x.1 = f32[4,64]{1,0} parameter(0), metadata={op_name="x"}
  %multiply_sine_fusion = f32[1024,64]{1,0} fusion(), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(positions)/sin" stack_frame_id=3}
  ROOT %ynn_fusion = f32[4,1024]{1,0} fusion(%x.1, %multiply_sine_fusion), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(positions)/dot_general" stack_frame_id=5}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
}
"""


class InvariantPerCallWork(Rule):
    """Per-call work that depends only on constants and weights: the same result on every call.

    What it flags:
        Two forms of one fact. (1) In one program (optimized HLO): ops the trace times one by one
        (the entry's, a ``while`` body's) whose values depend only on constants (``iota``,
        constants, random bits from a constant key) and weights, in groups of ops that feed each
        other, where work that changes reads the group's values. A group counts when it does more
        than move data (a convert, a transpose, arithmetic, random bits), its largest value is
        64 KiB or more and, with op stats, it takes 0.05% of the step or more; one finding per
        program, kind of input (weights, constants) and cause (the weights' dtype: a convert; their
        layout: transposes only; other work), on its costliest group, at the line of the op doing
        the work (the ``astype``, the ``moveaxis``). Ops do not join a group through a scalar (a
        scan's counter read by the slices of two weights). Time: the ops doing the work (on weights
        not the slices that only move them), on XLA:CPU scaled by their union over their sum (ops
        run side by side on the runtime's threads). A parameter is a
        weight when it is an array, not donated (``input_output_alias``, ``buffer_donor``),
        reaches through data movement and converts only the right operand of a ``dot`` without
        batch dimensions (``x @ W``, flax/keras ``Dense``), the table of a ``gather`` copying
        whole rows (an embedding lookup) or a convolution's kernel, is never updated in place
        (``dynamic-update-slice``/``scatter``) nor read on both sides of one product, is floating
        point (a ``pred`` mask or an integer table dequantized per call is by design), and where it enters a ``while`` the body returns it
        unchanged (not loop-carried state). The finding names the program, the op, the parameters
        (number, name, shape) and whether the work runs per call or per loop iteration.
        (2) Across eager programs (op stats and HLO stack frames): programs run on every step whose
        stack passes through an initialiser in model or user code (a function named ``init``,
        ``init_cache``, ``init_weights``...), some drawing random arrays of 64 KiB or more
        (``jax.random``'s programs): the model's initialisation runs on every step. Counted: the
        draws and the programs the step's own call compiled (those first compiled at the model's
        construction are shared with the step's forward pass: left out); time: the longer of their
        summed device time and summed host dispatch; line: the step's call into the initialiser.
        What it proves: in (1) the dependence is exact on the HLO; that a parameter holds the same
        array on every call is evidence, not proof (an activation passed as the right operand of
        a dot, or a cache the caller updates outside the program, would look the same). In (2)
        the trace does not record which program's output feeds which input: the rule shows random
        draws and programs compiled under an initialiser running on every step; it cannot prove
        that the key is a constant or that the results are discarded. Under ``jit`` XLA removes an
        initialisation's discarded work; what is left is constant-only work, which (1) finds.
    Why it costs:
        The same values are computed again on every call (on every iteration when the work sits
        in a loop body): recurrentgemma's sampler widens its bf16 embedding f32[8192,256] and
        copies it transposed on every call; transformers' Flax ``generate()`` runs ``module.init``
        (random init of every weight and a forward pass) on every call to build a zero KV cache.
    Example:
        ``logits = h @ params["emb"].T.astype(jnp.float32)`` in a jitted step given bf16 params;
        ``w = jax.random.normal(jax.random.PRNGKey(0), shape)`` inside a jitted step; an eager
        ``generate()`` whose ``init_cache`` calls ``module.init(jax.random.PRNGKey(0), ...)``.
    Fix:
        Do the work once, outside the per-call path: store weights in the dtype and layout the
        program computes with (``jax.tree.map(lambda w: w.astype(jnp.float32), params)`` after
        loading, or keep the transposed table), or compute in the stored dtype; compute a table
        or a random init once and pass it in; build a cache from shapes (``jax.eval_shape`` of the
        init, then zeros) or keep it between calls.
    """

    code = "HD014"
    name = "call.invariant-work-per-call"
    severity = Severity.MEDIUM
    requires = ("hlo",)
    fix = ""

    VALID = (
        Example(hlo=(_ACTIVATION_WIDENED,), note="an activation widened on every call (the left operand of its "
                "dot): an input, not a weight (jax.jit of `x.astype(f32) @ w` on XLA:CPU, stack-frame tables cut)"),
    )
    INVALID = (
        Example(hlo=(_WIDENED_EACH_CALL,), expect=("HD014 wrapped_convert",),
                note="a bf16 table widened on every call (jax.jit of `x @ emb.T.astype(f32)` on XLA:CPU, "
                     "stack-frame tables cut)"),
        Example(hlo=(_WIDENED_EACH_CALL,), opstats=(
            {"module": "jit_decode", "op": "wrapped_convert", "occurrences": 10, "time_per_step_us": 60.0,
             "category": "convert"},
            {"module": "jit_decode", "op": "ynn_fusion", "occurrences": 10, "time_per_step_us": 40.0}),
            step_time_us=200.0, num_steps=10, expect=("HD014 wrapped_convert",), note="with op stats"),
        Example(hlo=(_TABLE_EACH_CALL,), expect=("HD014 multiply_sine_fusion",),
                note="a table built from iota on every call (jax.jit of `x @ sin(arange(...) * 0.01).T` on XLA:CPU, "
                     "stack-frame tables cut)"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        for m in ctx.modules:
            if not stage_of(m, ctx.origin).optimized:
                continue  # before XLA's passes constants are not folded and converts not fused yet
            weights = weight_parameters(m)
            kept = [k for g in invariant_groups(m, dependence(m), set(weights))
                    if (k := _keep(ctx, m, g)) is not None]
            for on_weights in (True, False):  # one finding per program, kind of input and cause
                mine = sorted((k for k in kept if bool(k.group.parameters) == on_weights),
                              key=lambda k: -(k.time_us or sum(i.shape.nbytes for i in k.group.ops)))
                for cause in dict.fromkeys(_cause(k) for k in mine):
                    yield _program_finding(self, ctx, m, [k for k in mine if _cause(k) == cause], weights)
        if ctx.has_opstats and ctx.num_steps:
            found = _eager_init(self, ctx)
            if found is not None:
                yield found


@dataclass(frozen=True, slots=True)
class _Kept:
    """A group worth a finding: what it does and its time per step (None without op stats)."""

    group: InvariantGroup
    does: frozenset[str]
    time_us: float | None
    timed: tuple[HloInstruction, ...] = ()
    """The ops its time adds up (on weights, those doing the work)."""


def _keep(ctx: Context, m: HloModule, g: InvariantGroup) -> _Kept | None:
    does = set(group_work(m, g, MIN_BYTES))  # what its large values go through (not a loop counter's add)
    if not g.parameters:
        does -= _CHEAP_FROM_CONSTANTS
    if not does or not g.feeds_work or uniform_constants(m, g):
        return None  # moves data only, too small, a program of constants/weights alone, or one value
    if not ctx.has_opstats:
        return _Kept(g, frozenset(does), None, _timed(m, g))
    timed = _timed(m, g)
    time = sum(t.time_per_step_us for i in timed if (t := ctx.op_timing(m, i.name)) is not None)
    if not time or (ctx.step_time_us and 100.0 * time / ctx.step_time_us < MIN_SHARE_PCT):
        return None
    return _Kept(g, frozenset(does), time, timed)


def _timed(m: HloModule, g: InvariantGroup) -> tuple[HloInstruction, ...]:
    """The group's ops that a one-time preparation removes: on weights, the ops that only move them (a
    loop's slice of a stacked weight) stay when the weights are stored as the program uses them, so
    only those doing the work count; on constants, every op (the whole table goes)."""
    return tuple(i for i in g.timed if does_work(m, i)) if g.parameters else tuple(g.timed)


def _program_finding(rule: Rule, ctx: Context, m: HloModule, kept: list[_Kept],
                     weights: dict[int, WeightUse]) -> Finding:
    """One finding for the groups of one program on one kind of input, on the costliest group."""
    top = kept[0]
    g = top.group
    where = f", inside {', '.join(g.loops)} on every iteration" if g.loops else ""
    uses = [weights[p] for p in g.parameters if p in weights]
    n_ops = sum(len(k.group.ops) for k in kept)
    time = sum(k.time_us or 0.0 for k in kept) if ctx.has_opstats else None
    summed, ratio = time, None
    if time is not None:
        # Ops that run side by side (XLA:CPU's threads) take their union out of the step, not their sum.
        ratio = overlap_ratio(ctx, m.name, [i.name for k in kept for i in k.timed])
        time = time * ratio if ratio is not None else time
    cost = f"{n_ops} op{'s' if n_ops != 1 else ''}" + (f", {_ms(time)} per step" if time is not None else "")
    if uses:
        verbs = [_convert_verb(uses, g.anchor) if k == "convert" else "transposes"
                 for k in ("convert", "transpose") if k in top.does]
        names = "; ".join(f"parameter {u.parameter.parameter_number} {_param_name(u.parameter)} "
                          f"{dtype_shape(u.parameter.shape)}" for u in uses)
        message = (f"{g.anchor.name} {' and '.join(verbs) or 'computes with'} {names} into "
                   f"{dtype_shape(g.anchor.shape)} on every call{where}: a weight ({_why(m, uses[0])}), "
                   f"so this work is the same on every call")
        more = list(dict.fromkeys(_param_name(weights[p].parameter) for k in kept[1:] for p in k.group.parameters
                                  if p in weights and p not in g.parameters))
        source_inst = (_work_source(m, g, _cause(top)) or next((i for i in g.ops if i.source), None)
                       or key_instruction(m, uses[0].reader))
    else:
        rng = draws_random(m, (j for i in g.ops for j in inside(m, i)))
        message = (f"{g.anchor.name} ({dtype_shape(g.anchor.shape)}, {fmt_bytes(g.anchor.shape.nbytes)}) is computed "
                   f"from constants only{' (random bits from a constant key)' if rng else ''} on every "
                   f"call{where}: the same value each time")
        more = [k.group.anchor.name for k in kept[1:]]
        source_inst = next((i for i in [g.anchor, *g.ops] if i.source), g.anchor)
    if len(kept) > 1:
        message += (f"; also {', '.join(more[:3]) or g.anchor.name}{f' and {len(more) - 3} more' if len(more) > 3 else ''}"
                    f" ({len(kept) - 1} more group{'s' if len(kept) > 2 else ''} of ops)")
    return ctx.finding(
        rule, m, g.anchor, f"{message} ({cost})", recoverable_fraction=None if time is not None else 1.0,
        parts=bounded(ctx, op=time, op_bound=time) if time is not None else None, source_inst=source_inst,
        evidence=tuple(i.raw for i in g.ops[:3]) + tuple(f"weight: {_why(m, u)}" for u in uses)
        + tuple(f"{k.group.anchor.name}: {len(k.group.ops)} ops, {k.time_us or 0.0:.0f} us per step" for k in kept[1:]),
        extra=(("ops", [i.name for k in kept for i in k.group.ops]),
               ("parameters", sorted({p for k in kept for p in k.group.parameters})),
               ("parameter_names", [_param_name(weights[p].parameter) for k in kept for p in k.group.parameters
                                    if p in weights]),
               ("loops", list(g.loops)), ("inputs", "weights" if uses else "constants"), ("groups", len(kept)),
               ("cause", _cause(top)), ("timed_ops", [i.name for k in kept for i in k.timed]))
        + ((("summed_op_us_per_step", round(summed or 0.0, 1)), ("overlap_ratio", round(ratio, 3)))
           if ratio is not None else ()),
    )


def _cause(k: _Kept) -> str:
    """Which remedy the group's work calls for: the weights' stored dtype (a convert), their stored
    layout (a transpose or re-layout only), or work computed from them or from constants."""
    if not k.group.parameters:
        return "constants"
    if "convert" in k.does:
        return "dtype"
    return "layout" if k.does <= {"transpose"} else "compute"


# The jax primitive each cause's line is written as (an op's ``op_name`` ends with it).
_CAUSE_PRIMITIVES = {"dtype": ("convert", "convert_element_type"), "layout": ("transpose", "transpose")}


def _work_source(m: HloModule, g: InvariantGroup, cause: str) -> HloInstruction | None:
    """The op, with a line, that does the group's own work (the convert of a weight, its transpose),
    looking inside fusions and at the data movement feeding them; the entry's first."""
    if cause not in _CAUSE_PRIMITIVES:
        return None
    opcode, primitive = _CAUSE_PRIMITIVES[cause]
    for op in g.ops:
        for j in (op, *inside(m, op), *m.operands_of(op)):
            if j.source and (j.opcode == opcode or (j.op_name or "").rsplit("/", 1)[-1] == primitive):
                return j
    return None


def _ms(us: float) -> str:
    return f"{us / 1000.0:.1f} ms" if us >= 1000.0 else f"{us:.0f} us"


def _param_name(p: HloInstruction) -> str:
    """``params['emb']`` (the metadata's name for the argument), else the HLO name."""
    return (p.op_name or p.name).replace("\\'", "'")


def _convert_verb(uses: list[WeightUse], anchor: HloInstruction) -> str:
    bits = {u.parameter.shape.element_bits for u in uses}
    if anchor.shape.element_bits > max(bits):
        return "widens"
    return "narrows" if anchor.shape.element_bits < min(bits) else "converts"


def _why(m: HloModule, u: WeightUse) -> str:
    reader = key_instruction(m, u.reader) if u.reader.opcode == "fusion" else u.reader
    through = f", passed unchanged through {u.loop}" if u.loop else ""
    return f"{u.how} {reader.name}{through}; not donated"


def _stack_of(m: HloModule) -> tuple[Frame, ...]:
    """The Python stack under which the program was first traced (its first op's that has one)."""
    return next((i.stack for i in [*m.entry.instructions, *m.instructions()] if i.stack), ())


def _init_at(stack: tuple[Frame, ...]) -> int | None:
    """Index of the outermost initialiser frame in model or user code (innermost-first stack)."""
    found = None
    for k, f in enumerate(stack):
        if _INIT.match(f.function.rsplit(".", 1)[-1]) and not framework_of(f.file):
            found = k
    return found


def _runs_per_step(ctx: Context, m: HloModule, rows: Any) -> float:
    """How often the program ran per step on one device: its entry ops' runs (a loop body's ops run
    once per iteration)."""
    entry = rows[rows["op"].isin([i.name for i in m.entry.instructions])]
    rows = entry if len(entry) else rows
    devices = rows["devices"].clip(lower=1) if "devices" in rows else 1
    return float((rows["occurrences"] / devices).max()) / ctx.num_steps


@dataclass(frozen=True, slots=True)
class _Eager:
    """A program that ran on every step and was first compiled under an initialiser."""

    module: HloModule
    stack: tuple[Frame, ...]
    at: int
    """Index of the outermost initialiser frame in ``stack``."""
    runs: float
    device_us: float
    host_us: float

    @property
    def cost_us(self) -> float:
        return max(self.device_us, self.host_us)

    @property
    def caller(self) -> Frame:
        return self.stack[min(self.at + 1, len(self.stack) - 1)]


def _eager_init(rule: Rule, ctx: Context) -> Finding | None:
    """Form (2): programs run every step under an initialiser, some of them drawing random numbers."""
    picked: list[_Eager] = []
    for m in ctx.modules:
        stack = _stack_of(m)
        at = _init_at(stack)
        rows = ctx.module_rows(m) if at is not None else None
        if at is None or rows is None or not len(rows):
            continue
        runs = _runs_per_step(ctx, m, rows)
        if runs >= 0.5:
            dispatch = ctx.dispatch(m)
            picked.append(_Eager(m, stack, at, runs, float(rows["time_per_step_us"].fillna(0).sum()),
                                 dispatch.per_call_us * runs if dispatch is not None else 0.0))
    # Random draws of a weight's size (a key split is shared with samplers; a weight init is not).
    drawn = [p for p in picked if draws_random(p.module) and p.module.entry.root.shape.nbytes >= MIN_BYTES]
    # The step's own call into the initialiser: a stack that is not the model's construction.
    on_step = [p for p in picked if not any(f.function.endswith("__init__") for f in p.stack[p.at:])]
    # Counted: the draws, and what the step's own call compiled. Other programs first compiled at the
    # model's construction (its forward pass: a kernel's transpose...) are shared with the step's
    # forward pass, which the trace cannot tell apart: left out.
    counted = list({id(p): p for p in [*drawn, *on_step]}.values())
    # Eager programs queue behind each other: a dispatch span can hold the wait for an earlier
    # program's device work, so device times and host spans are summed apart and the longer taken.
    device, host = sum(p.device_us for p in counted), sum(p.host_us for p in counted)
    total = max(device, host)
    if not drawn or (ctx.step_time_us and 100.0 * total / ctx.step_time_us < MIN_SHARE_PCT):
        return None
    sites: dict[Frame, float] = {}
    for p in on_step or drawn:
        sites[p.caller] = sites.get(p.caller, 0.0) + p.cost_us
    via = next(p for p in on_step or drawn if p.caller == max(sites, key=sites.__getitem__))
    inits: dict[str, int] = {}
    for p in counted:
        inits[p.stack[p.at].function] = inits.get(p.stack[p.at].function, 0) + 1
    names = sorted({p.module.name for p in drawn})
    site = via.caller
    left = len(picked) - len(counted)
    message = (f"the model's initialisation runs on every step: {len(counted)} programs compiled under "
               f"{', '.join(f'{k} ({n})' for k, n in inits.items())} run every step, {len(drawn)} of them "
               f"drawing random arrays of 64 KiB or more ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}): "
               f"{_ms(total)} per step (the longer of their device time, {_ms(device)}, and host dispatch, "
               f"{_ms(host)}); the step calls {via.stack[via.at].function} at "
               f"{site.file.rsplit('/', 1)[-1]}:{site.line}")
    if not on_step:
        message += " (where these cached programs were first compiled: the step's own call is not in the HLO)"
    if left:
        message += (f"; {left} more program{'s' if left != 1 else ''} compiled at the model's construction "
                    f"also run every step, shared with the step's own forward pass: not counted")
    top = max(counted, key=lambda p: p.device_us)
    op = max((i for i in top.module.entry.instructions if i.opcode not in ("parameter", "tuple", "constant")),
             key=lambda i: (t.time_per_step_us if (t := ctx.op_timing(top.module, i.name)) else 0.0),
             default=top.module.entry.root)
    found = ctx.finding(
        rule, top.module, op, message, fix="",
        # The longer of the two: the device time, and the host's dispatch beyond it.
        parts=bounded(ctx, op=device, op_bound=device, host=total - device),
        evidence=tuple(f"{p.module.name}({p.module.program_id}): {p.runs:.1f} runs/step, device "
                       f"{p.device_us:.0f} us, host dispatch {p.host_us:.0f} us per step, under "
                       f"{p.stack[p.at].function}" for p in sorted(counted, key=lambda p: -p.cost_us)[:8]),
        extra=(("programs", [f"{p.module.name}({p.module.program_id})" for p in counted]),
               ("random_programs", [f"{p.module.name}({p.module.program_id})" for p in drawn]),
               ("initialisers", inits)),
    )
    # The line to edit is the step's call into the initialiser, with the stack from there outwards.
    return replace(found, source=f"{site.file}:{site.line}",
                   stack=tuple((f.file, f.line, f.function) for f in via.stack[via.at + 1:]))
