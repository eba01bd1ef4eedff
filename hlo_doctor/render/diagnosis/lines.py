"""One line per finding, for logs and CI: ``concise`` (like ruff's) and ``github`` (workflow commands).

``concise``: ``path:line: HD002 [high] message (module/op shape, 1,562 us/step)``, a path relative to
the source root where the source is in the checkout, else relative to its package root
(``keras_hub/src/samplers/sampler.py``). ``github``: ``::error file=...,line=...,title=...::``
annotations, which GitHub Actions shows on the pull request's lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hlo_doctor.core.escape.terminal import term
from hlo_doctor.core.format import fmt_path, fmt_us, recoverable_sum, split_source
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.hlo.shape import fmt_shape
from hlo_doctor.render.github import annotation
from hlo_doctor.render.locations import map_source

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis

__all__ = ["to_concise", "to_github"]




def _where(f: Finding, root: Path) -> tuple[str | None, str, int | None]:
    """(path relative to ``root`` when the source is in the checkout, else None; the path people
    read: that, or relative to its package root; line)."""
    path, line = split_source(f.source)
    if not path:
        return None, "", None
    mapped = map_source(path, root)
    return mapped, (mapped or fmt_path(path)), line


def _what(f: Finding) -> str:
    op = "/".join(x for x in (f.module, f.op) if x)
    bits = [x for x in (op, fmt_shape(f.shape)) if x]
    if f.time_per_step_us is not None:
        bits.append(f"{fmt_us(f.time_per_step_us)}/step")
    what = f" ({' '.join(bits)})" if bits else ""
    # The recoverable time with what it is made of: the same sum as every other view prints.
    return what + (f"; recoverable {recoverable_sum(f)}" if f.parts else "")


def to_concise(diagnosis: Diagnosis, source_root: Path | None = None) -> str:
    """One line per finding, then the summary line."""
    root = (source_root or Path.cwd()).resolve()
    lines = []
    for f in diagnosis.findings:
        _, path, line = _where(f, root)
        where = f"{path}:{line}: " if path and line else (f"{path}: " if path else "")
        fixable = f" [fixable: {f.fix}]" if f.fix else ""
        remedy = f" [remedy: {f.remedy}]" if f.remedy else ""
        lines.append(f"{where}{f.code} [{f.severity}] {f.message}{_what(f)}{fixable}{remedy}")
    lines.append(diagnosis.summary_line())
    if diagnosis.fixes_line():
        lines.append(diagnosis.fixes_line())
    if diagnosis.compiler_inserted_line():
        lines.append(diagnosis.compiler_inserted_line())
    if diagnosis.stage_line:
        lines.append(diagnosis.stage_line)
    if diagnosis.compile_line():
        lines.append(diagnosis.compile_line())
    # One line each whatever the names hold: a newline or an escape sequence in a path, a module or an
    # op name is shown, so no line of this output starts where a capture says.
    return "\n".join(term(x) for x in lines) + "\n"


def _level(severity: Severity) -> str:
    if severity >= Severity.HIGH:
        return "error"
    return "warning" if severity >= Severity.MEDIUM else "notice"


def to_github(diagnosis: Diagnosis, source_root: Path | None = None) -> str:
    """GitHub Actions workflow commands: one annotation per finding (file and line where the source is
    in the checkout), then a ``::notice`` with the summary."""
    root = (source_root or Path.cwd()).resolve()
    lines = []
    for f in diagnosis.findings:
        mapped, _, line = _where(f, root)
        in_checkout = mapped if mapped and not Path(mapped).is_absolute() else ""
        remedy = f" Remedy: {f.remedy}" if f.remedy else ""
        lines.append(annotation(_level(f.severity), f.message + _what(f) + remedy, title=f"{f.code} {f.name}",
                                file=in_checkout, line=line))
    lines.append(annotation("notice", diagnosis.summary_line(), title="hlo-doctor diagnose"))
    return "\n".join(lines) + "\n"
