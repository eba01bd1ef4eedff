"""HD005: compiles inside the measured window: steps that ran off the precompiled graphs."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hlo_doctor.lint import (
    CompileAccount,
    Context,
    Example,
    Finding,
    ProgramCompiles,
    Rule,
    Severity,
    compile_account,
)

# A typed shape that a cache-miss explanation or an event stat may carry: ``bf16[64,256000]``.
_TYPED_SHAPE = re.compile(r"\b(?:bf16|f16|f32|f64|s8|s16|s32|s64|u8|u32|pred)\[[\d,]*\]")
EAGER_FLOOR_PCT = 0.05
"""Eager-op compiles are reported from this share of the step (%), the lowest severity band's edge."""

# Two calls of sample() off the menu (each a cache miss holding a backend compile), and a dispatch
# that missed jax's fast path but found its program (no backend compile: no compile).
_EVENTS = (
    {"name": "pjit.py:cache_miss", "start_us": 1000.0, "duration_us": 52000.0, "module": "jit_sample",
     "detail": "explain: now bf16[64,1024] and before f32[64,1024]"},
    {"name": "backend_compile", "start_us": 1500.0, "duration_us": 40000.0, "module": "jit_sample"},
    {"name": "pjit.py:cache_miss", "start_us": 60000.0, "duration_us": 0.1},
    {"name": "pjit.py:cache_miss", "start_us": 90000.0, "duration_us": 30000.0, "module": "jit_sample"},
    {"name": "backend_compile", "start_us": 91000.0, "duration_us": 25000.0},
)
# An eager decode step as XLA:CPU traces it: a concatenate and a gather run outside jit on a longer
# sequence each step (each compiles a one-op program, dispatched by jax's apply_primitive), and a
# jitted attend() compiled again for the new length. Threads and frames as the reader records them.
_PY = "host python 1"


def _eager(op: str, start: float, step: int, pid: int) -> tuple[dict[str, object], ...]:
    return (
        {"name": "$pjit.py:250 cache_miss", "start_us": start, "duration_us": 600.0, "thread": _PY,
         "function": op, "frames": ("dispatch.py:81 apply_primitive", "core.py:1285 process_primitive"),
         "step": step},
        {"name": "backend_compile_and_load", "start_us": start + 100, "duration_us": 450.0, "thread": _PY,
         "function": op, "frames": ("dispatch.py:81 apply_primitive",), "step": step,
         "module": f"jit_{op}", "program_id": pid},
        {"name": "PjRtCpuClient::Compile", "start_us": start + 120, "duration_us": 400.0,
         "thread": "host /host:CPU 7", "step": step},
    )


def _attend(start: float, step: int, pid: int) -> tuple[dict[str, object], ...]:
    return (
        {"name": "$pjit.py:250 cache_miss", "start_us": start, "duration_us": 9000.0, "thread": _PY,
         "function": "attend", "frames": ("decode.py:40 step",), "step": step},
        {"name": "backend_compile_and_load", "start_us": start + 2000, "duration_us": 6000.0, "thread": _PY,
         "function": "attend", "frames": ("decode.py:40 step",), "step": step, "module": "jit_attend",
         "program_id": pid},
        {"name": "PjRtCpuClient::Compile", "start_us": start + 2100, "duration_us": 5800.0,
         "thread": "host /host:CPU 7", "step": step},
    )


_EAGER_DECODE = tuple(
    e for step in range(3) for e in (
        *_eager("concatenate", 20000.0 * step + 100, step, 10 * step + 1),
        *_eager("gather", 20000.0 * step + 1000, step, 10 * step + 2),
        *_attend(20000.0 * step + 2000, step, 10 * step + 3),
    ))


class OffPrecompiledMenu(Rule):
    """Compiles inside the measured window: steps that ran off the warmed-up (precompiled) graphs.

    What it flags:
        Programs compiled inside the measured steps, one finding per program (module name) with its
        count, time and program ids. A compile is XLA's backend compile with the events around it
        (jax's ``cache_miss``, lowering, the client's own compile on another thread or nested on
        the same one) counted once; a dispatch that missed jax's fast path without compiling is no
        compile. A program compiled in (almost) every step, or on every call, is named as
        compiled on every call, with the line that builds it. Single-op programs that jax compiles
        for ops run outside ``jit`` (eager ops) are counted apart, in one finding when they cost at
        least 0.05% of the step.
    Why it costs:
        A serving engine warms up by compiling a menu of graphs (batch buckets x dtypes x flags).
        A call whose inputs are not on that menu compiles at run time: tens to hundreds of
        milliseconds inside a step, a batch-TTFT spike per bucket, and, when it recurs, a
        throughput loss. This is how a half-done dtype change shows up (throughput -26%, batch
        TTFT x4.4 on tpu-inference 0.24.0). A program compiled on every call (a ``while`` of fresh
        closures run eagerly, a ``jax.jit`` built inside the step, a sequence that grows by one
        each step) pays its whole compile every step.
    Example:
        The runner stops widening logits to f32 while ``_precompile_sampling`` still builds its
        dummy logits in f32: every ``sample()`` bucket compiles again while serving. An eager
        ``generate()`` whose ``lax.while_loop`` body is a closure created per call compiles the loop
        on every call.
    Fix:
        Rekey the warm-up with the runtime inputs (same dtype and shape buckets) in the same
        change as the dtype change; ``hlo-doctor rules explain HD006`` finds the mismatch in the
        source, and ``bf16-greedy-sampler`` rekeys the sampling menu together with the dtype. For a
        program compiled on every call: jit the step once (outside the loop over calls), pass what
        changes as arguments rather than closing over it, and give growing inputs a fixed size
        (a preallocated cache and a position).
    """

    code = "HD005"
    name = "compile.off-precompiled-menu"
    severity = Severity.HIGH
    requires = ("opstats",)
    fix = ""

    VALID = (
        Example(opstats=({"module": "jit_sample", "op": "copy", "occurrences": 10,
                          "time_per_step_us": 30.0},),
                num_steps=10, step_time_us=1000.0, note="a trace without compile events"),
        Example(opstats=({"module": "jit_sample", "op": "copy", "occurrences": 10,
                          "time_per_step_us": 30.0},),
                num_steps=10, step_time_us=1000.0,
                compile_events=({"name": "$pjit.py:250 cache_miss", "start_us": 100.0, "duration_us": 0.1},
                                {"name": "$pjit.py:250 cache_miss", "start_us": 900.0, "duration_us": 0.1}),
                note="dispatches that missed jax's fast path and found their program: no compile"),
        Example(opstats=({"module": "jit_sample", "op": "copy", "occurrences": 3,
                          "time_per_step_us": 30.0},),
                num_steps=3, step_time_us=10_000_000.0,
                compile_events=_eager("concatenate", 100.0, 0, 1),
                note="one eager op compiled, under 0.05% of a 10 s step: below the floor"),
    )
    INVALID = (
        Example(opstats=({"module": "jit_sample", "op": "copy", "occurrences": 10,
                          "time_per_step_us": 30.0},),
                num_steps=10, step_time_us=1000.0, compile_events=_EVENTS,
                expect=("HD005 @jit_sample",), note="two compiles of jit_sample while serving"),
        Example(opstats=({"module": "jit_attend", "op": "dot", "occurrences": 3, "time_per_step_us": 30.0},),
                num_steps=3, step_time_us=25000.0, compile_events=_EAGER_DECODE,
                expect=("HD005 @jit_attend", "HD005 @"),
                note="an eager decode step: attend() compiled on every call, 6 eager ops compiled apart "
                     "(events as read from a real XLA:CPU capture, tests/trace/test_compiles.py)"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        account = compile_account(ctx)
        steps = max(ctx.num_steps, 1)
        several = _several_programs(ctx)
        programs = list(account.programs)
        unnamed = next((p for p in programs if not p.module), None)
        if unnamed is not None and len(several) == 1:
            # The trace did not name the compiled program; one module ran as several programs.
            programs = [p for p in programs if p.module] + [_renamed(unnamed, next(iter(several)))]
        for p in programs:
            yield self._program(ctx, p, steps, several)
        eager = self._eager(ctx, account, steps)
        if eager is not None:
            yield eager

    def _program(self, ctx: Context, p: ProgramCompiles, steps: int, several: dict[str, list[int | None]]) -> Finding:
        what = p.module or "an unnamed program"
        per_step = p.time_us / steps
        pct = 100.0 * per_step / ctx.step_time_us if ctx.step_time_us else None
        if p.every_call:
            msg = (f"{what} is compiled on every call: {p.count} compiles in {p.steps_with_compile or steps} "
                   f"steps{f' ({p.calls} calls)' if p.calls else ''}, {per_step / 1000:.1f} ms/step")
        else:
            msg = (f"{p.count} compile{'s' if p.count != 1 else ''} of {what} inside the measured window "
                   f"({p.time_us / 1000:.1f} ms in all): calls that missed the precompiled menu")
        if p.program_ids:
            msg += "; program ids " + ", ".join(str(i) for i in p.program_ids[:6]) + \
                (", ..." if len(p.program_ids) > 6 else "")
        signatures = list(dict.fromkeys(_signatures(ctx, p.module)))
        shapes = sorted({s for c in p.compiles for e in c.events for s in _TYPED_SHAPE.findall(f"{e.name} {e.detail}")})
        if not p.module and several:
            msg += "; modules that ran as several programs: " + ", ".join(
                f"{name} ({len(ids)})" for name, ids in sorted(several.items()))
        if len(signatures) > 1:
            msg += f"; {p.module} ran with inputs " + " / ".join(
                signatures[:4]) + (" / ..." if len(signatures) > 4 else "")
        elif shapes:
            msg += f"; inputs seen: {', '.join(shapes)}"
        return Finding(
            code=self.code, name=self.name, severity=self.severity, message=msg, module=p.module, op="",
            time_per_step_us=per_step, pct_of_step=pct, recoverable_us=per_step, parts=(("compile", per_step),),
            source=p.source,
            evidence=tuple(_evidence(c) for c in p.compiles)[:8],
            extra=(("compiles", p.count), ("compile_time_us", p.time_us), ("program_ids", p.program_ids),
                   ("every_call", p.every_call), ("steps_compiled", p.steps_with_compile), ("calls", p.calls),
                   ("programs", len(several.get(p.module, ()))), ("input_shapes", tuple(shapes))),
        )

    def _eager(self, ctx: Context, account: CompileAccount, steps: int) -> Finding | None:
        if not account.eager:
            return None
        per_step = account.eager_us / steps
        pct = 100.0 * per_step / ctx.step_time_us if ctx.step_time_us else None
        if pct is not None and pct < EAGER_FLOOR_PCT:
            return None
        n = len(account.eager)
        ops = account.eager_ops()
        msg = (f"{n} eager op{'s' if n != 1 else ''} compiled inside the measured window "
               f"({account.eager_us / 1000:.1f} ms in all, {per_step / 1000:.1f} ms/step): ops run outside jit "
               f"compile one program each for every new shape or dtype ("
               + ", ".join(f"{op} x{k}" for op, k in ops[:6]) + (", ..." if len(ops) > 6 else "") + ")")
        return Finding(
            code=self.code, name=self.name, severity=self.severity, message=msg, time_per_step_us=per_step,
            pct_of_step=pct, recoverable_us=per_step, parts=(("compile", per_step),), evidence=tuple(_evidence(c) for c in account.eager)[:8],
            extra=(("eager_compiles", n), ("compile_time_us", account.eager_us), ("ops", tuple(ops))),
        )


def _evidence(c: object) -> str:
    # ``jit_f(12) @ 1,234 us: 52.0 ms (XLA 40.0 ms), step 3, from decode.py:40 step``
    module = getattr(c, "module", "") or "?"
    pid = getattr(c, "program_id", None)
    text = (f"{module}{f'({pid})' if pid is not None else ''} @ {getattr(c, 'start_us', 0.0):,.0f} us: "
            f"{getattr(c, 'duration_us', 0.0) / 1000:.1f} ms (XLA {getattr(c, 'backend_us', 0.0) / 1000:.1f} ms)")
    step = getattr(c, "step", -1)
    if step >= 0:
        text += f", step {step}"
    caller = next((f for f in getattr(c, "frames", ()) if ".py:" in f), "")
    return text + (f", from {caller}" if caller else "")


def _renamed(p: ProgramCompiles, module: str) -> ProgramCompiles:
    return ProgramCompiles(module, p.compiles, p.num_steps, p.calls, p.every_call, p.source)


def _several_programs(ctx: Context) -> dict[str, list[int | None]]:
    """Module name -> program ids, for names that ran as several programs in the window (each
    compile of a jitted function gets a new id)."""
    ids: dict[str, set[int | None]] = {}
    for m in ctx.modules:
        ids.setdefault(m.name, set()).add(m.program_id)
    return {name: sorted(v, key=lambda x: (x is None, x or 0)) for name, v in ids.items() if len(v) > 1}


def _signatures(ctx: Context, name: str) -> list[str]:
    """Entry parameter types of each program named ``name``, by program id."""
    out = []
    for m in sorted((m for m in ctx.modules if m.name == name and name),
                    key=lambda m: (m.program_id is None, m.program_id or 0)):
        out.append("(" + ", ".join(p.shape.text(with_layout=False) for p in m.entry.parameters) + ")")
    return out
