"""What each fix promises: the time its findings recover, less what a what-if run says it costs here.

A finding's recoverable time is never negative: it is waste a fix removes. A fix can also cost time
on a given machine (a narrower argmax that XLA:CPU of one jaxlib runs slower: ``lint.whatif``); the
rule that measured it says so in the finding's ``extra["fix_cost_us"]`` (per step). A fix's promise
is its findings' recoverable time (each op once, as the summary counts it) less those costs: what
``verify`` of that fix should measure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hlo_doctor.core.format import fmt_duration
from hlo_doctor.core.model import Finding


@dataclass(frozen=True, slots=True)
class FixPromise:
    """One fix's findings, the time they recover and what the fix costs here, per step (us)."""

    fix: str
    findings: int
    recoverable_us: float
    cost_us: float

    @property
    def net_us(self) -> float:
        """Recovered less cost: negative where the fix makes the step slower here."""
        return self.recoverable_us - self.cost_us

    def to_dict(self) -> dict[str, object]:
        return {"fix": self.fix, "findings": self.findings, "recoverable_us": self.recoverable_us,
                "cost_us": self.cost_us, "net_us": self.net_us}

    def line(self, step_us: float | None) -> str:
        """``fix bf16-greedy-sampler: ~38.3 ms recovered by 3 findings, less ~22.3 ms ... net ~16.0 ms per step (~14%)``."""
        pct = f" (~{100.0 * self.net_us / step_us:.0f}% of the step)" if step_us else ""
        verb = "net" if self.net_us >= 0 else "net loss"
        return (f"fix {self.fix}: ~{fmt_duration(self.recoverable_us)} recovered by {self.findings} "
                f"finding{'s' if self.findings != 1 else ''}, less ~{fmt_duration(self.cost_us)} it costs on "
                f"this machine (what-if run): {verb} ~{fmt_duration(abs(self.net_us))} per step{pct}")


def fix_cost(findings: Iterable[Finding]) -> float:
    """Per step: the time the findings' fix costs here (each op once, its largest figure)."""
    best: dict[tuple[str, int | None, str], float] = {}
    for f in findings:
        cost = dict(f.extra).get("fix_cost_us")
        if isinstance(cost, (int, float)) and cost > 0:
            key = (f.module, f.program_id, f.op) if f.op else (f.code, None, f.message)
            best[key] = max(best.get(key, 0.0), float(cost))
    return sum(best.values())


def fix_promises(findings: Iterable[Finding]) -> tuple[FixPromise, ...]:
    """One promise per fix offered by the findings, the largest net first."""
    by_fix: dict[str, list[Finding]] = {}
    for f in findings:
        if f.fix:
            by_fix.setdefault(f.fix, []).append(f)
    out = [FixPromise(fix, len(fs), total_recoverable(fs), fix_cost(fs)) for fix, fs in by_fix.items()]
    return tuple(sorted(out, key=lambda p: (-p.net_us, p.fix)))


def total_recoverable(findings: Iterable[Finding]) -> float:
    """Sum of recoverable time, counting each (module, program id, op) once with its largest estimate.

    Host time has one owner: a finding that leaves out host time another rule counts says so in
    ``extra["held_by"]`` ((code, module, us) per step: HD015 leaves an eager call's Python to HD003);
    that time is added back when no finding of that code on that module is in ``findings`` (the owner
    was not selected or did not fire), so it is counted exactly once either way.
    """
    findings = list(findings)
    best: dict[tuple[str, int | None, str], float] = {}
    for f in findings:
        if f.recoverable_us is None:
            continue
        key = (f.module, f.program_id, f.op) if f.op else (f.code, None, f.message)
        best[key] = max(best.get(key, 0.0), f.recoverable_us)
    owners = {(f.code, f.module) for f in findings}
    orphaned = sum(float(us) for f in findings for k, v in f.extra if k == "held_by"
                   for code, module, us in v if (code, module) not in owners)
    return sum(best.values()) + orphaned
