"""The gate's memory half: each program's peak in the candidate against the baseline's, from their
buffer assignments. Compile-time figures carry no noise, so the judgement is a plain limit
(``max_peak_growth_pct``), and a violation lists what grew at the peak."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.format import fmt_bytes, fmt_source
from hlo_doctor.gate.judge import is_ignored
from hlo_doctor.gate.policy import GatePolicy
from hlo_doctor.gate.result import Violation

if TYPE_CHECKING:
    from hlo_doctor.memory import MemoryReport, PeakBuffer, ProgramMemory

__all__ = ["PeakDiff", "judge_memory"]


@dataclass(frozen=True, slots=True)
class PeakDiff:
    """One program's peak on both sides (matched on its module name, the largest of its compiles)."""

    module: str
    baseline_bytes: int | None
    candidate_bytes: int | None
    grew: tuple[str, ...]
    """The candidate's buffers at the peak that are new or larger than the baseline's, largest first."""
    judgement: str

    @property
    def delta_bytes(self) -> int:
        return (self.candidate_bytes or 0) - (self.baseline_bytes or 0)

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "baseline_bytes": self.baseline_bytes, "candidate_bytes": self.candidate_bytes,
                "delta_bytes": self.delta_bytes, "grew": list(self.grew), "judgement": self.judgement}


def _largest(programs: Iterable[ProgramMemory]) -> dict[str, ProgramMemory]:
    out: dict[str, ProgramMemory] = {}
    for p in programs:
        if p.error:
            continue
        if p.module not in out or p.peak_bytes > out[p.module].peak_bytes:
            out[p.module] = p
    return out


def _key(b: PeakBuffer) -> tuple[str, str, str]:
    # Instruction names change between compiles; what a buffer is does not: its kind, op and shape.
    return (b.category, b.opcode, b.shape)


def _what_grew(base: ProgramMemory | None, cand: ProgramMemory) -> tuple[str, ...]:
    before: dict[tuple[str, str, str], list[int]] = {}
    for b in base.buffers_at_peak if base is not None else ():
        before.setdefault(_key(b), []).append(b.size_bytes)
    grew: list[tuple[int, str]] = []
    for b in cand.buffers_at_peak:
        sizes = before.get(_key(b))
        if sizes:
            size = sizes.pop(0)
            if b.size_bytes <= size:
                continue
            grew.append((b.size_bytes - size, f"{b.category} {b.instruction} {b.shape}: {fmt_bytes(size)} -> "
                                              f"{fmt_bytes(b.size_bytes)}" + (f" ({fmt_source(b.source)})" if b.source else "")))
        else:
            grew.append((b.size_bytes, f"{b.category} {b.instruction} {b.shape}: new, {fmt_bytes(b.size_bytes)}"
                                       + (f" ({fmt_source(b.source)})" if b.source else "")))
    grew.sort(key=lambda g: -g[0])
    return tuple(text for _, text in grew[:5])


def judge_memory(baseline: MemoryReport | None, candidate: MemoryReport | None,
                 policy: GatePolicy) -> tuple[tuple[PeakDiff, ...], tuple[Violation, ...], str | None]:
    """(per-program peaks, violations, note): a program of the candidate's steps whose peak grew by
    more than ``policy.max_peak_growth_pct`` over the baseline's (and by at least
    ``policy.peak_floor_bytes``) fails, listing what grew; a program new in the candidate is listed
    and judged against the floor alone."""
    if baseline is None or candidate is None:
        missing = "baseline" if baseline is None else "candidate"
        return (), (), f"no buffer assignments in the {missing} (a trace JSON or an export): peaks not judged"
    base, cand = _largest(baseline.step_programs), _largest(candidate.step_programs)
    diffs: list[PeakDiff] = []
    violations: list[Violation] = []
    limit = policy.max_peak_growth_pct / 100.0
    for name in sorted(set(base) | set(cand)):
        if is_ignored(f"{name}|peak-memory", policy):
            continue  # the policy's ignore globs match a program's peak as ``module|peak-memory``
        b, c = base.get(name), cand.get(name)
        if c is None:
            assert b is not None
            diffs.append(PeakDiff(name, b.peak_bytes, None, (), "vanished"))
            continue
        b_bytes = b.peak_bytes if b is not None else 0
        growth = c.peak_bytes - b_bytes
        grew = _what_grew(b, c) if growth > 0 else ()
        fails = growth >= max(policy.peak_floor_bytes, 1) and (b is None or growth > limit * b_bytes)
        judgement = "grew beyond the limit" if fails else ("new" if b is None else
                                                           "grew" if growth > 0 else "shrank" if growth < 0 else "same")
        diffs.append(PeakDiff(name, b.peak_bytes if b is not None else None, c.peak_bytes, grew, judgement))
        if fails:
            was = f"{fmt_bytes(b_bytes)} -> " if b is not None else "new program: "
            pct = f" (+{100 * growth / b_bytes:.1f}%, limit {policy.max_peak_growth_pct:g}%)" if b_bytes else ""
            violations.append(Violation(
                "peak-memory", name,
                f"{name} peak {was}{fmt_bytes(c.peak_bytes)}{pct}; grew: " + ("; ".join(grew) or "-")))
    diffs.sort(key=lambda d: (d.judgement != "grew beyond the limit", -abs(d.delta_bytes), d.module))
    return tuple(diffs), tuple(violations), None
