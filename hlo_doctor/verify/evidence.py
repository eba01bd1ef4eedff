"""Check 4's evidence: a variant's own decode steps captured, diagnosed by hlo-doctor's rules, and what
each argmax in them reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import HloDoctorError
from hlo_doctor.verify.results import HloEvidence
from hlo_doctor.verify.settings import HLO_RULES, ProgressFn, VerifySettings
from hlo_doctor.verify.variants import Variant


def argmax_reads(ctx: Any) -> tuple[str, ...]:
    """``module: dtype[dims]`` of the large tensor each argmax/argmin in ``ctx``'s modules reads.

    The bytes an argmax reads are those of its entry-level op's operands (on XLA:CPU a bf16 argmax
    fusion reads bf16 and widens in registers), so the dtype is read there, not from the reducer.
    """
    from hlo_doctor.diagnose import reduce_inputs, selection_reduces

    out: list[str] = []
    for module in ctx.modules:
        for op, inner, kind in selection_reduces(ctx, module):
            if kind not in ("argmax", "argmin"):
                continue
            data = module.instruction(reduce_inputs(inner)[0], inner.computation)
            elements = data.shape.num_elements if data is not None else 0
            operands = module.operands_of(op) if op is not inner else ([data] if data is not None else [])
            big = [o for o in operands if o.shape.num_elements == elements and not o.shape.is_tuple]
            for o in big or operands[:1]:
                dims = ",".join(str(d) for d in o.shape.dims)
                entry = f"{module.name}: {o.shape.dtype}[{dims}]"
                if entry not in out:
                    out.append(entry)
    return tuple(out)


def hlo_evidence(run_dir: Path) -> HloEvidence:
    """Diagnose a captured run with hlo-doctor's rules HD001-HD004 and read its argmax dtypes."""
    from hlo_doctor.diagnose import diagnose, load_context
    from hlo_doctor.rulebook import load_rulebook

    ctx = load_context(run_dir)
    diagnosis = diagnose(ctx, load_rulebook(), select=HLO_RULES)
    return HloEvidence(
        run_dir=str(run_dir), findings=diagnosis.findings, rules_run=diagnosis.rules_run,
        argmax_reads=argmax_reads(ctx), step_time_us=diagnosis.step_time_us, argmax_times=argmax_times(ctx),
    )


def argmax_times(ctx: Any) -> tuple[tuple[str, float], ...]:
    """(module, time per step in us) of the entry op that runs each argmax/argmin, where timed."""
    from hlo_doctor.diagnose import selection_reduces

    out: dict[str, float] = {}
    for module in ctx.modules:
        for op, _, kind in selection_reduces(ctx, module):
            if kind in ("argmax", "argmin") and module.name not in out:
                timing = ctx.op_timing(module, op.name)
                if timing is not None:
                    out[module.name] = timing.time_per_step_us
    return tuple(out.items())


def capture_variant(variant: Variant, settings: VerifySettings, run_dir: Path,
                    progress: ProgressFn | None) -> HloEvidence:
    """Profile a few decode steps of ``variant``'s own engine and diagnose what ran."""
    from hlo_doctor.engines.session import capture_engine

    if getattr(variant.module, "profile_target", None) is None:
        return HloEvidence(str(run_dir), (), (), (), None,
                           error=f"{variant.label} engine has no profile_target(config): nothing to capture")
    try:
        path = capture_engine(
            variant.module, variant.config, name=f"{variant.label}:{variant.source}", out_dir=run_dir,
            steps=settings.profile_steps, warmup=1,
            progress=(lambda stage, done, total: progress(f"profile {variant.label}: {stage}", done, total))
            if progress else None,
        )
        return hlo_evidence(path)
    except HloDoctorError as exc:
        return HloEvidence(str(run_dir), (), (), (), None, error=exc.one_line())
