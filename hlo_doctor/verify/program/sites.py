"""Where ``verify FILE.py:FUNC --fix FIX`` applies the fix when no ``--fix-line`` is given: the lines the
baseline's own findings name.

The baseline is captured first and diagnosed by every rule. A finding offers ``FIX`` at a line of
``FILE`` when ``FIX`` is one of the fixes of the finding's rule and its codemod matches there, read
as ``diagnose`` reads a finding (:mod:`hlo_doctor.fixes.source.applicable`): the finding's frames in
files a person edits, innermost first; the innermost only, unless the fix looks up the stack
(``donate-state``: the jit of a loop is at the caller's level). The finding's own hint goes with
its line (``donate-state``: the argument the copied parameter belongs to). When no finding offers
``FIX`` in ``FILE``, :func:`sites_from_findings` says why, per finding of the fix's rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import Finding

if TYPE_CHECKING:
    from hlo_doctor.fixes.source.base import Hint

__all__ = ["FixSite", "refuse_installed", "sites_from_findings"]

INSTALLED = ("site-packages", "dist-packages")


@dataclass(frozen=True, slots=True)
class FixSite:
    """A line of the target's file where the fix applies, and the finding that names it."""

    line: int
    argument: str
    """The argument the finding names (``donate-state``), or ""."""
    finding: str
    """``HD009 jit_step/copy.7 f32[1024,64,128]``: the finding that offers the fix here."""
    safe: bool
    targets: tuple[tuple[str, str], ...] = ()
    """(rule, program) of every baseline finding that offered the fix at this line: what must be gone."""
    hint: Hint | None = field(default=None, compare=False, repr=False)
    """The finding's whole hint (dtypes, rank, the other lines of its stack), as the codemod read it."""

    def describe(self, file: str) -> str:
        """``step.py:42 (argument state): HD009 jit_step/copy.7 ...``."""
        arg = f" (argument {self.argument})" if self.argument else ""
        return f"{file}:{self.line}{arg}, from {self.finding}"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"line": self.line, "argument": self.argument, "finding": self.finding, "safe": self.safe,
                "targets": [f"{code} {module}" for code, module in self.targets]}


def _label(f: Finding) -> str:
    shape = f" {f.shape}" if f.shape else ""
    return f"{f.code} {f.module}/{f.op}{shape}"


def _offer(finding: Finding, fix_id: str, file: Path, texts: dict[Path, str]) -> tuple[FixSite | None, str, bool]:
    """The site ``finding`` offers ``fix_id`` at in ``file``, or why it offers none there and whether
    that is the codemod's refusal at a line of the file (else: the finding names no line of it)."""
    from hlo_doctor.fixes.catalog import load_source_fix
    from hlo_doctor.fixes.source.applicable import editable_frames
    from hlo_doctor.fixes.source.base import NotApplicable, Rewritten
    from hlo_doctor.fixes.source.lines import rewrite_at

    fix = load_source_fix(fix_id)
    frames = list(editable_frames(finding, file.parent))
    tried = frames if fix.walks_stack else frames[:1]
    if not any(path == file for path, _ in tried):
        named = ", ".join(f"{p.name}:{ln}" for p, ln in frames[:3]) or (finding.source or "no line")
        return None, f"{_label(finding)} names no line of {file.name} ({named})", False
    hint = fix.hint(finding)
    why = ""
    for i, (path, line) in enumerate(tried):
        if path != file:
            continue
        others = tuple(ln for p, ln in frames[i + 1:] if p == path)
        at, outcome = rewrite_at(fix, texts[file], line, dataclasses.replace(hint, lines=others))
        if isinstance(outcome, Rewritten):
            return FixSite(at, hint.argument, _label(finding), outcome.safe, ((finding.code, finding.module),),
                           dataclasses.replace(hint, lines=others)), "", False
        assert isinstance(outcome, NotApplicable)
        why = f"{_label(finding)} at {file.name}:{line}: {outcome.reason}"
        if outcome.kind != "no-pattern":
            break  # the pattern is there and was refused: an outer line is not this finding's code
    return None, why, bool(why)


def refuse_installed(file: Path, fix_id: str) -> None:
    """:class:`InputError` for a file of an installed package, before anything is imported: as in
    ``diagnose``, its frames are not a person's to edit, so no finding would name a line of it."""
    if any(part in INSTALLED for part in file.resolve().parts):
        raise InputError(f"--fix {fix_id}: {file} is inside an installed package ({file.parent}); no finding names "
                         "a line of it (its frames are not editable, as in diagnose)",
                         f"copy {file.name} out of site-packages (with a step() appended) and verify the copy, "
                         "as docs/fixes.md 'Prove a fix on your program' shows, or pass --fix-line LINE")


def sites_from_findings(findings: Sequence[Finding], fix_id: str, file: Path) -> tuple[FixSite, ...]:
    """The lines of ``file`` where the baseline's findings offer ``fix_id`` (first finding first, one
    site per line and argument).

    :class:`InputError` naming the reason when none does: no finding of the fix's rules, none that
    names a line of the file, or the codemod refused at each line named.
    """
    from hlo_doctor.fixes.catalog import catalog_entry
    from hlo_doctor.fixes.source.applicable import candidates

    file = file.resolve()
    texts = {file: file.read_text(encoding="utf-8")}
    rules = catalog_entry(fix_id).rules
    sites: dict[tuple[int, str], FixSite] = {}
    reasons: dict[str, bool] = {}  # why a finding offers nothing here: True where the codemod refused a line
    for f in findings:
        if f.code == "HD000" or all(e.fix_id != fix_id for e in candidates(f)):
            continue
        site, why, refused_here = _offer(f, fix_id, file, texts)
        if site is not None:
            key = (site.line, site.argument)
            was = sites.setdefault(key, site)
            if site.targets[0] not in was.targets:
                sites[key] = dataclasses.replace(was, targets=was.targets + site.targets)
        elif why:
            reasons.setdefault(why, refused_here)
    if sites:
        return tuple(sites.values())
    if not reasons:
        codes = sorted({f.code for f in findings if f.code != "HD000"})
        raise InputError(f"--fix {fix_id}: no finding of the baseline's capture offers it in {file.name} (its rules "
                         f"{', '.join(rules)} found nothing; the capture's findings: {', '.join(codes) or 'none'})",
                         "run hlo-doctor profile and diagnose on TARGET to see what it finds, or pass --fix-line LINE")
    refused, shown = any(reasons.values()), list(reasons)
    raise InputError(f"--fix {fix_id}: no finding of the baseline's capture offers it in {file.name}: "
                     + "; ".join(shown[:3]) + (f" (and {len(shown) - 3} more)" if len(shown) > 3 else ""),
                     "the fix refuses the line its finding names (--fix-line gets the same answer)" if refused else
                     "pass --fix-line LINE to apply it at a line of your choice (hlo-doctor apply-fix shows why not)")
