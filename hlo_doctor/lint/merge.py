"""One finding per cause: merging what several findings say about one cause.

- :func:`merge_recompiled`: the same rule on the same op of a program recompiled under several ids.
- :func:`merge_same_line`: one rule's findings on several ops of one program that come from the same
  source line (a sum over every parameter leaf written once, reduced per leaf; a layer's pattern
  unrolled): the line is what a person edits, so it is one finding listing the ops.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from hlo_doctor.core.model import Finding, Severity

__all__ = ["merge_recompiled", "merge_same_line"]

_METADATA = re.compile(r",?\s*metadata=\{[^}]*\}")
_PROGRAM_ID = re.compile(r"\(\d+\)")


def _canonical(evidence: Iterable[str]) -> tuple[str, ...]:
    return tuple(" ".join(_PROGRAM_ID.sub("(#)", _METADATA.sub("", line)).split()) for line in evidence)


def merge_recompiled(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per cause: findings of one rule on the same op of the same module name, with the
    same evidence (program ids and metadata aside), become one.

    A program recompiled under several ids runs its copies in different steps: each copy's time per
    step is its share of the window, so the cause costs their sum per step. The merged finding is the
    first copy's, with those sums, the ids in ``extra`` (``programs``, ``program_ids``) and a note in
    its message. Findings without an op (a module's, a source line's) and internal errors are kept as
    they are; so is the order of first appearance.
    """
    groups: dict[object, list[Finding]] = {}
    for i, f in enumerate(findings):
        key: object = (f.code, f.module, f.op, _canonical(f.evidence)) \
            if f.op and f.module and f.severity != Severity.ERROR else i
        groups.setdefault(key, []).append(f)
    return [_merged(group) if len(group) > 1 else group[0] for group in groups.values()]


def _merged(group: list[Finding]) -> Finding:
    copies: dict[int | None, Finding] = {}
    for f in group:
        copies.setdefault(f.program_id, f)  # the same op of the same program twice: one copy
    first = group[0]
    if len(copies) == 1:
        return first
    ids = sorted(p for p in copies if p is not None)

    def total(name: str) -> float | None:
        values = [getattr(f, name) for f in copies.values() if getattr(f, name) is not None]
        return sum(values) if values else None

    n = len(copies)
    shown = ", ".join(str(p) for p in ids[:6]) + (", ..." if len(ids) > 6 else "")
    note = (f" (the same op in {n} programs of {first.module}, recompiled as ids {shown}; "
            f"time summed over them)")
    return replace(first, message=first.message + note, time_per_step_us=total("time_per_step_us"),
                   pct_of_step=total("pct_of_step"), recoverable_us=total("recoverable_us"),
                   extra=(*first.extra, ("programs", n), ("program_ids", tuple(ids))))


def merge_same_line(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (rule, module, program id, source line): a rule that flags several ops of one
    program written by the same line says it once, on the costliest op, with ``extra`` ``ops`` (every
    op, so the summary counts each once) and ``same_line_ops`` (how many), and the time and
    recoverable time summed (different ops of one program: their times add). Findings without a
    source line, without an op, or internal errors are kept as they are."""
    groups: dict[object, list[Finding]] = {}
    for i, f in enumerate(findings):
        key: object = (f.code, f.module, f.program_id, f.source) \
            if f.source and f.op and f.module and f.severity != Severity.ERROR else i
        groups.setdefault(key, []).append(f)
    return [_same_line(group) if len(group) > 1 else group[0] for group in groups.values()]


def _same_line(group: list[Finding]) -> Finding:
    ops = list(dict.fromkeys(f.op for f in group))
    if len(ops) == 1:
        return group[0]
    top = max(group, key=lambda f: (f.recoverable_us or 0.0, f.time_per_step_us or 0.0))

    def total(name: str) -> float | None:
        values = [getattr(f, name) for f in group if getattr(f, name) is not None]
        return sum(values) if values else None

    covered: list[str] = []
    for f in group:
        listed = dict(f.extra).get("ops")
        covered.extend([f.op, *(str(o) for o in listed)] if isinstance(listed, (list, tuple)) else [f.op])
    shown = ", ".join(ops[:4]) + (f", +{len(ops) - 4} more" if len(ops) > 4 else "")
    note = f" (the same at {len(ops)} ops of this program from one line: {shown}; time summed over them)"
    extra = tuple((k, v) for k, v in top.extra if k != "ops")
    return replace(top, message=top.message + note, time_per_step_us=total("time_per_step_us"),
                   pct_of_step=total("pct_of_step"), recoverable_us=total("recoverable_us"),
                   extra=(*extra, ("ops", tuple(dict.fromkeys(covered))), ("same_line_ops", len(ops))))
