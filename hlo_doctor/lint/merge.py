"""One finding per cause: merging what several findings say about one cause.

- :func:`merge_recompiled`: the same rule on the same op of a program recompiled under several ids.
- :func:`merge_same_line`: one rule's findings on several ops of one program that come from the same
  source line (a sum over every parameter leaf written once, reduced per leaf; a layer's pattern
  unrolled): the line is what a person edits, so it is one finding listing the ops.
- :func:`merge_memory`: a memory finding on the cause a time finding names, folded into it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from hlo_doctor.core.model import Finding, Severity, sum_parts

__all__ = ["merge_memory", "merge_recompiled", "merge_same_line"]

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
                   parts=_parts(copies.values()),
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
                   parts=_parts(group),
                   extra=(*extra, ("ops", tuple(dict.fromkeys(covered))), ("same_line_ops", len(ops))))


def _parts(group: Iterable[Finding]) -> tuple[tuple[str, float], ...]:
    """The group's parts added name by name; a finding with a recoverable time but no parts counts as
    op time, so the parts still add up to the summed recoverable time."""
    return sum_parts(f.parts or ((("op", f.recoverable_us),) if f.recoverable_us is not None else ())
                     for f in group)


def merge_memory(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per waste that costs time and memory: a memory finding (``extra.freed_bytes``) on
    an op a time finding also names (the returned copy HD002 prices), or on the argument a convert
    program makes (``extra.widened_by``: HD003's program), is folded into that finding, which then
    names both: its message ends with the memory half, its ``extra`` gains ``freed_bytes`` (the
    most one program's peak drops), ``freed_bytes_by_program``, ``memory`` (the memory finding's message) and ``memory_codes``. Memory findings with no time
    finding on their cause stay as they are."""
    out = list(findings)
    memory = [f for f in out if "freed_bytes" in dict(f.extra) and f.severity != Severity.ERROR]
    timed = [f for f in out if "freed_bytes" not in dict(f.extra) and f.severity != Severity.ERROR and f.op]
    for mem in memory:
        extra = dict(mem.extra)
        host = next((t for t in timed if t.module == mem.module and t.op == mem.op
                     and t.program_id == mem.program_id), None)
        if host is None and extra.get("widened_by"):
            host = next((t for t in timed if t.module == extra["widened_by"]), None)
        if host is None:
            continue
        i = out.index(host)
        held = dict(host.extra)
        # Bytes of one program's peak add up; those of two programs do not (each has its own peak).
        by_program = dict(held.get("freed_bytes_by_program", ()) or ())
        by_program[mem.module] = int(by_program.get(mem.module, 0)) + int(extra["freed_bytes"])
        freed = max(by_program.values())
        notes = [*held.get("memory", ()), mem.message] if isinstance(held.get("memory"), (list, tuple)) \
            else [mem.message]
        codes = [*held.get("memory_codes", ()), mem.code] if isinstance(held.get("memory_codes"), (list, tuple)) \
            else [mem.code]
        rest = tuple((k, v) for k, v in host.extra
                     if k not in ("freed_bytes", "freed_bytes_by_program", "memory", "memory_codes"))
        merged = replace(host, message=f"{host.message}. Memory ({mem.code}): {mem.message}",
                         extra=(*rest, ("freed_bytes", freed), ("freed_bytes_by_program", tuple(by_program.items())),
                                ("memory", tuple(notes)), ("memory_codes", tuple(codes))))
        out[i] = merged
        timed[timed.index(host)] = merged
        out.remove(mem)
    return out
