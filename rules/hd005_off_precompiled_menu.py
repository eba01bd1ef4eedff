"""HD005: compiles inside the measured window: steps that ran off the precompiled graphs."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hlo_doctor.lint import CompileEvent, Context, Example, Finding, Rule, Severity

# A function or module name as compile events spell it: ``jit(sample)``, ``jit_sample``.
_JIT_NAME = re.compile(r"\bjit[(_]([\w.<>-]+)\)?")
# A typed shape that a cache-miss explanation or an event stat may carry: ``bf16[64,256000]``.
_TYPED_SHAPE = re.compile(r"\b(?:bf16|f16|f32|f64|s8|s16|s32|s64|u8|u32|pred)\[[\d,]*\]")

_EVENTS = (
    {"name": "pjit.py:cache_miss", "start_us": 1000.0, "duration_us": 52000.0, "module": "jit_sample",
     "detail": "explain: now bf16[64,1024] and before f32[64,1024]"},
    {"name": "backend_compile", "start_us": 1500.0, "duration_us": 40000.0, "module": "jit_sample"},
    {"name": "pjit.py:cache_miss", "start_us": 90000.0, "duration_us": 30000.0, "module": "jit_sample"},
)


class OffPrecompiledMenu(Rule):
    """Compiles inside the measured window: steps that ran off the warmed-up (precompiled) graphs.

    What it flags:
        Compile work the trace records inside the measured steps (the Python tracer's
        ``cache_miss`` / ``_pjit_lower`` / ``backend_compile`` events, XLA's compile events). Nested
        events of one compile count once; one finding per module, naming it and, where the trace
        shows it, the input dtype/shape that differed from the precompiled one.
    Why it costs:
        A serving engine warms up by compiling a menu of graphs (batch buckets x dtypes x flags).
        A call whose inputs are not on that menu compiles at run time: tens to hundreds of
        milliseconds inside a step, a batch-TTFT spike per bucket, and, when it recurs, a
        throughput loss. This is how a half-done dtype change shows up (throughput -26%, batch
        TTFT x4.4 on tpu-inference 0.24.0).
    Example:
        The runner stops widening logits to f32 while ``_precompile_sampling`` still builds its
        dummy logits in f32: every ``sample()`` bucket compiles again while serving.
    Fix:
        Rekey the warm-up with the runtime inputs (same dtype and shape buckets) in the same
        change as the dtype change; ``hlo-doctor rules explain HD006`` finds the mismatch in the
        source, and ``bf16-greedy-sampler`` rekeys the sampling menu together with the dtype.
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
    )
    INVALID = (
        Example(opstats=({"module": "jit_sample", "op": "copy", "occurrences": 10,
                          "time_per_step_us": 30.0},),
                num_steps=10, step_time_us=1000.0, compile_events=_EVENTS,
                expect=("HD005 @jit_sample",), note="two compiles of jit_sample while serving"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        compiles = _outermost(ctx.compile_events)
        by_module: dict[str, list[tuple[CompileEvent, list[CompileEvent]]]] = {}
        for outer, nested in compiles:
            by_module.setdefault(_module_of(outer, nested), []).append((outer, nested))
        steps = max(ctx.num_steps, 1)
        recompiled = _recompiled_modules(ctx)
        if "" in by_module and len(recompiled) == 1:
            # The trace did not name the compiled program; one module ran as several programs.
            only = next(iter(recompiled))
            by_module.setdefault(only, []).extend(by_module.pop(""))
        for module, group in sorted(by_module.items()):
            total_us = sum(o.duration_us for o, _ in group)
            shapes = sorted({s for o, n in group for e in (o, *n)
                             for s in _TYPED_SHAPE.findall(f"{e.name} {e.detail}")})
            what = module or "an unnamed program"
            per_step = total_us / steps
            pct = 100.0 * per_step / ctx.step_time_us if ctx.step_time_us else None
            msg = (f"{len(group)} compile{'s' if len(group) != 1 else ''} of {what} inside the measured "
                   f"window ({total_us / 1000:.1f} ms in all): calls that missed the precompiled menu")
            signatures = recompiled.get(module, [])
            if module == "" and recompiled:
                msg += "; modules that ran as several programs: " + ", ".join(
                    f"{name} ({len(sigs)})" for name, sigs in sorted(recompiled.items()))
            if signatures:
                msg += f"; {module} ran as {len(signatures)} programs with inputs " + " / ".join(
                    sig for _, sig in signatures[:4]) + (" / ..." if len(signatures) > 4 else "")
            elif shapes:
                msg += f"; inputs seen: {', '.join(shapes)}"
            yield Finding(
                code=self.code, name=self.name, severity=self.severity, message=msg, module=module,
                op="", time_per_step_us=per_step, pct_of_step=pct, recoverable_us=per_step,
                evidence=tuple(f"{e.name} @ {e.start_us:.0f} us, {e.duration_us / 1000:.1f} ms"
                               + (f" ({e.detail})" if e.detail else "")
                               for o, n in group for e in (o, *n))[:8],
                extra=(("compiles", len(group)), ("compile_time_us", total_us), ("input_shapes", tuple(shapes))),
            )


def _recompiled_modules(ctx: Context) -> dict[str, list[tuple[int | None, str]]]:
    """Module name -> (program id, entry parameter types) for names that ran as several programs.

    Each compile of a jitted function gets a new program id; a name that ran under several ids in
    the window, with different parameter types, is the same function called off its first graph.
    """
    out: dict[str, list[tuple[int | None, str]]] = {}
    for m in ctx.modules:
        sig = "(" + ", ".join(p.shape.text(with_layout=False) for p in m.entry.parameters) + ")"
        out.setdefault(m.name, []).append((m.program_id, sig))
    return {name: sorted(set(sigs), key=lambda x: (x[0] is None, x[0] or 0))
            for name, sigs in out.items() if len({s for _, s in sigs}) > 1}


def _outermost(events: tuple[CompileEvent, ...]) -> list[tuple[CompileEvent, list[CompileEvent]]]:
    """Compile events not nested in another one, each with the events nested in it."""
    ordered = sorted(events, key=lambda e: (e.start_us, -e.duration_us))
    out: list[tuple[CompileEvent, list[CompileEvent]]] = []
    for e in ordered:
        if out:
            outer = out[-1][0]
            if e.start_us >= outer.start_us and e.start_us + e.duration_us <= outer.start_us + outer.duration_us:
                out[-1][1].append(e)
                continue
        out.append((e, []))
    return out


def _module_of(outer: CompileEvent, nested: list[CompileEvent]) -> str:
    for e in (outer, *nested):
        if e.module:
            return e.module
    for e in (outer, *nested):
        m = _JIT_NAME.search(f"{e.name} {e.detail}")
        if m:
            return f"jit_{m.group(1)}"
    return ""
