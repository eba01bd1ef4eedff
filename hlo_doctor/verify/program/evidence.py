"""What each side's compiled programs hold: a short capture of each after the rounds, diagnosed by every
rule, the findings the treatment must no longer have (check 3), and the ops that stopped running.

The capture is ``hlo-doctor profile``'s own (:func:`hlo_doctor.capture.capture_run`), taken after the
measured rounds so that the profiler never runs inside one. Ops are matched between the two captures on
the op-stats table's canonical key (program without its id | opcode | shape), as ``hlo-doctor gate``
matches them: an op of the baseline whose key the treatment's capture lacks no longer runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hlo_doctor.core.errors import HloDoctorError
from hlo_doctor.core.model import Finding
from hlo_doctor.verify.evidence import hlo_evidence
from hlo_doctor.verify.program.target import Side
from hlo_doctor.verify.results import Check, HloEvidence, RemovedOp
from hlo_doctor.verify.settings import ProgressFn

if TYPE_CHECKING:
    import pandas as pd

NAME = "treatment's findings"


@dataclass(frozen=True, slots=True)
class Captured:
    """One side's capture: the diagnosis of it and its op-stats table (None when it failed)."""

    evidence: HloEvidence
    table: pd.DataFrame | None


def capture_side(side: Side, run_dir: Path, steps: int, progress: ProgressFn, *, warmup: int = 0) -> Captured:
    """Profile ``steps`` calls of ``side`` into ``run_dir`` (after ``warmup`` untraced calls: 0 when the side
    is already warm) and diagnose them with every rule."""
    from hlo_doctor.capture import capture_run

    try:
        path, stats = capture_run(
            side.step, steps=steps, warmup=warmup, out_dir=run_dir, target=f"{side.label}:{side.spec}",
            progress=lambda stage, done, total: progress(f"profile {side.label}: {stage}", done, total))
        return Captured(hlo_evidence(path, select=()), stats.table)
    except HloDoctorError as exc:
        return Captured(HloEvidence(str(run_dir), (), (), (), None, error=exc.one_line()), None)


def _name(f: Finding) -> str:
    return f"{f.code} {f.module}/{f.op}" + (f" ({f.source})" if f.source else "")


def _codes(findings: Sequence[Finding]) -> str:
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.code] = counts.get(f.code, 0) + 1
    return ", ".join(f"{code}" + (f" x{n}" if n > 1 else "") for code, n in sorted(counts.items())) or "none"


def check_findings(baseline: HloEvidence, treatment: HloEvidence, rules: Sequence[str],
                   targets: Sequence[tuple[str, str]] = ()) -> Check:
    """Check 3: the treatment's capture has no finding of ``rules`` (the fix's); without rules, no finding
    the baseline did not have. The figure says which findings remain.

    ``targets``: (rule, program) of the baseline's findings that offered the fix at the lines it changed
    (``--fix`` without ``--fix-line``, with or without ``--rules``): those of ``rules`` must be gone; a
    finding of ``rules`` elsewhere (a program no line of the file made, which the fix was never applied
    to, or a rule whose findings offered no line) is listed, not held against it.
    """
    for side, ev in (("treatment", treatment), ("baseline", baseline)):
        if ev.error:
            return Check(3, NAME, False, f"{side} capture failed", ev.error)
    crashed = [f for f in treatment.findings if f.code == "HD000"]
    if crashed:
        return Check(3, NAME, False, "a rule crashed on the treatment", "; ".join(f.message for f in crashed))
    base = [f for f in baseline.findings if f.code != "HD000"]
    treat = [f for f in treatment.findings if f.code != "HD000"]
    if rules:
        not_run = [c for c in rules if c not in treatment.rules_run]
        if not_run:
            return Check(3, NAME, False, f"rules not run: {', '.join(not_run)}",
                         "the capture lacked what these rules need (HLO modules, op stats)")
        aimed = set(targets)
        had = [f for f in base if f.code in rules and (not aimed or (f.code, f.module) in aimed)]
        left = [f for f in treat if f.code in rules and (not aimed or (f.code, f.module) in aimed)]
        elsewhere = [f for f in treat if f.code in rules and aimed and (f.code, f.module) not in aimed]
        others = [f for f in treat if f.code not in rules]
        keys = {(f.code, f.module) for f in base}
        new = [f for f in others if (f.code, f.module) not in keys]
        at = " at the fixed lines" if aimed else ""
        figure = f"{', '.join(rules)}{at}: {len(had)} -> {len(left)}; other findings left: {_codes(others)}"
        if elsewhere:
            figure += f"; not at the fixed lines: {_codes(elsewhere)}"
        if new:
            # Not the fix's to remove, but a person should see what the change brought in.
            figure += f" (new in the treatment: {_codes(new)})"
        if left:
            return Check(3, NAME, False, figure, "still there: " + "; ".join(_name(f) for f in left[:4]))
        detail = ("gone: " + "; ".join(_name(f) for f in had[:4])) if had else (
            "the baseline had no finding of these rules: nothing for the fix to remove")
        if new:
            detail += "; new in the treatment: " + "; ".join(_name(f) for f in new[:4])
        if elsewhere:
            detail += ("; left where the fix was not applied (no line of the file offered it): "
                       + "; ".join(_name(f) for f in elsewhere[:4]))
        return Check(3, NAME, True, figure, detail)
    keys = {(f.code, f.module) for f in base}
    new = [f for f in treat if (f.code, f.module) not in keys]
    gone = [f for f in base if (f.code, f.module) not in {(g.code, g.module) for g in treat}]
    figure = f"{len(base)} -> {len(treat)} findings; gone: {_codes(gone)}; left: {_codes(treat)}"
    if new:
        return Check(3, NAME, False, figure, "new in the treatment: " + "; ".join(_name(f) for f in new[:4]))
    return Check(3, NAME, True, figure, ("gone: " + "; ".join(_name(f) for f in gone[:4])) if gone else "")


def slower_selections(baseline: HloEvidence, treatment: HloEvidence, backend: str) -> list[str]:
    """A note for each program whose argmax got slower in the treatment's capture (a narrower read can
    be slower where the backend widens inside its reduce: XLA:CPU of jaxlib 0.10)."""
    before = dict(baseline.argmax_times)
    notes = []
    for module, after in treatment.argmax_times:
        was = before.get(module)
        if was and after > was * 1.1:
            reads = next((r.split(": ", 1)[1] for r in treatment.argmax_reads if r.startswith(f"{module}: ")), "")
            notes.append(f"{module}'s argmax" + (f" (reads {reads})" if reads else "") + f" got slower: "
                         f"{was / 1e3:.3f} -> {after / 1e3:.3f} ms/step in the captures (x{after / was:.2f}), "
                         f"on {backend}: the selection itself, not the removed work")
    return notes


def removed_ops(baseline: Captured, treatment: Captured) -> tuple[RemovedOp, ...]:
    """The baseline's ops that the treatment's capture does not run, slowest first (the rule that flagged
    each one, when one did)."""
    from hlo_doctor.gate.match import aggregate

    if baseline.table is None or treatment.table is None:
        return ()
    base = aggregate(baseline.table, "baseline")
    treat = aggregate(treatment.table, "treatment")
    flagged = {(f.module, f.op): f.code for f in baseline.evidence.findings}
    out = []
    for key in base.index.difference(treat.index, sort=False):
        row = base.loc[key]
        ops = str(row["ops"])
        code = next((flagged[(m, op)] for (m, op) in flagged if op in ops.split(", ") and str(row["module"]) in m), "")
        out.append(RemovedOp(code, ops, str(row["module"]), str(row["shape"]), float(row["time_per_step_us"]), "gone"))
    return tuple(sorted(out, key=lambda o: -(o.time_per_step_us or 0.0)))
