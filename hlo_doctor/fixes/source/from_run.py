"""``apply-fix --from RUN``: every fixable finding of a diagnosis, planned whole, written only if all hold.

Each finding that carries a fix (``fix``, and where it applies: ``extra['fix_site']``) is a site.
Sites of one fix in one file form one transaction (one manifest, ``--revert`` per fix and file);
several fixes of one file are applied one after the other, each on the text the previous one left,
with the diagnosis's lines carried through the earlier edits. Unsafe edits are left out unless
``unsafe`` (and said so). Everything is planned in memory first: when a site no longer holds its
pattern, or a file a fixable finding names was modified after the run (its lines may have moved),
nothing at all is written, and the outcome says which site or file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import HloDoctorError, InputError
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.fixes import FixApplied, FixResult, apply_fix
from hlo_doctor.fixes.catalog import catalog_entry, fixes_for_rule, load_source_fix
from hlo_doctor.fixes.safe_io import target_lock
from hlo_doctor.fixes.source.applicable import applicable_fix, editable_frames, site_of
from hlo_doctor.fixes.source.apply import commit_file, run_sites, unified_diff
from hlo_doctor.fixes.source.base import Hint
from hlo_doctor.fixes.targets import detect_target

__all__ = ["FromRun", "Outcome", "apply_from_findings", "finding_from_dict"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one finding: ``status`` is applied, dry-run, unsafe (left), refused,
    already-applied or no-fix; ``where`` the file and line the fix changes."""

    code: str
    op: str
    fix_id: str
    where: str
    status: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"code": self.code, "op": self.op, "fix": self.fix_id, "where": self.where, "status": self.status,
                "detail": self.detail}


@dataclass
class FromRun:
    """The outcome of ``--from``: one :class:`Outcome` per finding, the combined diff, what was written."""

    outcomes: list[Outcome] = field(default_factory=list)
    diff: str = ""
    files: list[Path] = field(default_factory=list)
    manifests: list[Path] = field(default_factory=list)
    refused: bool = False
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"status": "refused" if self.refused else ("dry-run" if self.dry_run else "applied"),
                "findings": [o.to_dict() for o in self.outcomes], "files": [str(p) for p in self.files],
                "manifests": [str(p) for p in self.manifests], "diff": self.diff}


def finding_from_dict(doc: dict[str, Any]) -> Finding:
    """A finding as ``diagnose --format json`` wrote it."""
    extra = doc.get("extra") or {}
    return Finding(
        code=str(doc.get("code", "")), name=str(doc.get("name", "")),
        severity=Severity.parse(str(doc.get("severity", "info"))), message=str(doc.get("message", "")),
        module=str(doc.get("module", "")), op=str(doc.get("op", "")), shape=str(doc.get("shape", "")),
        source=str(doc.get("source", "")), evidence=tuple(str(e) for e in doc.get("evidence") or ()),
        fix=str(doc.get("fix") or ""), extra=tuple(extra.items()) if isinstance(extra, dict) else (),
        stack=tuple((str(f.get("file", "")), int(f.get("line") or 0), str(f.get("function", "")))
                    for f in doc.get("stack") or () if isinstance(f, dict)),
    )


@dataclass
class _Site:
    fix_id: str
    path: Path
    line: int
    hint: Hint
    findings: list[Finding]


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _under(path: Path, root: Path) -> bool:
    """Whether ``path``, links resolved, is ``root`` or below it."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def _sites(findings: Iterable[Finding], root: Path, out: FromRun) -> list[_Site]:
    by_key: dict[tuple[str, Path, int], _Site] = {}
    for f in findings:
        if not f.fix:
            out.outcomes.append(Outcome(f.code, f.op, "", "", "no-fix", "no fix applies to this finding's code"))
            continue
        site = site_of(f)
        if site is None:
            found = applicable_fix(f, root)
            site = (found.path, found.line) if found is not None else None
        if site is None:
            out.outcomes.append(Outcome(f.code, f.op, f.fix, "", "no-fix", f"{f.fix} no longer applies to its code"))
            continue
        path, line = site
        path = path if path.is_absolute() else root / path
        if not _under(path, root):
            # The diagnosis is an artifact from elsewhere: whatever its fix site says, only files under
            # the source root are ever written.
            out.outcomes.append(Outcome(f.code, f.op, f.fix, str(path), "refused",
                                        f"the fix site {path} is outside the source root {root.resolve()}"))
            continue
        entry = catalog_entry(f.fix)
        hint = load_source_fix(f.fix).hint(f) if entry.scope == "file" else Hint()
        key = (f.fix, path.resolve(), line)
        if key in by_key:
            by_key[key].findings.append(f)
        else:
            by_key[key] = _Site(f.fix, path.resolve(), line, hint, [f])
    return list(by_key.values())


# run.json writes its time to the second: a file saved within a second before the run is not newer.
_CLOCK_S = 1.0


def _changed_after(path: Path, created: float | None) -> str:
    if created is None:
        return ""
    try:
        return " (the file was modified after the run)" if os.stat(path).st_mtime > created + _CLOCK_S else ""
    except OSError:
        return ""


def _stale(findings: Sequence[Finding], root: Path, created: float | None) -> list[Path]:
    """Files a fixable finding names that were modified after the run: its lines may have moved."""
    if created is None:
        return []
    stale: dict[Path, None] = {}
    for f in findings:
        if not f.fix and not fixes_for_rule(f.code):
            continue
        for path, _ in editable_frames(f, root):
            if _changed_after(path, created):
                stale[path] = None
    return list(stale)


def apply_from_findings(findings: Sequence[Finding], root: Path, *, unsafe: bool = False, dry_run: bool = False,
                        created: float | None = None) -> FromRun:
    """Apply every fixable finding's fix (see the module docstring); ``created``: when the run was taken."""
    root = root.resolve()
    out = FromRun(dry_run=dry_run)
    stale = _stale(findings, root, created)
    if stale:
        # A fix found applicable now could be at another line than the run's: trust neither.
        out.refused = True
        names = ", ".join(_relative(p, root) for p in stale)
        out.outcomes = [Outcome(f.code, f.op, f.fix, "", "refused", f"{names} modified after the run: the lines it "
                                f"names may have moved; profile again") for f in findings]
        return out
    sites = _sites(findings, root, out)
    order = {e: i for i, e in enumerate(("bf16-greedy-sampler", "donate-state", "eager-widening",
                                         "argmax-without-softmax", "slice-before-matmul"))}
    tree_sites = [s for s in sites if catalog_entry(s.fix_id).scope == "tree"]
    file_sites = sorted((s for s in sites if catalog_entry(s.fix_id).scope == "file"),
                        key=lambda s: (str(s.path), order.get(s.fix_id, 99), s.line))
    # Plan every file fix in memory.
    planned: list[tuple[Path, str, str, str]] = []  # (path, fix, text before, text after)
    originals: dict[Path, str] = {}
    for path in dict.fromkeys(s.path for s in file_sites):
        try:
            originals[path] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read {path} ({exc})", "the diagnosis names a file that is gone") from exc
        current = originals[path]
        for fix_id in dict.fromkeys(s.fix_id for s in file_sites if s.path == path):
            group = [s for s in file_sites if s.path == path and s.fix_id == fix_id]
            run = run_sites(load_source_fix(fix_id), current, [(s.line, s.hint) for s in group], unsafe=unsafe,
                            base=originals[path])
            for s, (status, words) in zip(group, run.outcomes, strict=True):
                where = f"{_relative(path, root)}:{s.line}"
                if status in ("no-pattern", "refused"):
                    out.refused = True
                    words += _changed_after(path, created)
                shown = {"changed": "dry-run" if dry_run else "applied"}.get(status, status)
                out.outcomes.extend(Outcome(f.code, f.op, fix_id, where, shown, words) for f in s.findings)
            if run.text != current:
                planned.append((path, fix_id, current, run.text))
                current = run.text
        if current != originals[path]:
            out.diff += unified_diff(_relative(path, root), originals[path], current)
    if out.refused:
        out.outcomes = [o if o.status not in ("applied", "dry-run") else
                        Outcome(o.code, o.op, o.fix_id, o.where, "not-written", "another site was refused")
                        for o in out.outcomes]
        out.outcomes += [Outcome(f.code, f.op, s.fix_id, f"{_relative(s.path, root)}:{s.line}", "not-written",
                                 "another site was refused") for s in tree_sites for f in s.findings]
        return out
    _tree_fixes(tree_sites, root, out, dry_run=dry_run)
    if dry_run or out.refused:
        return out
    for path, fix_id, before, after in planned:
        with target_lock(path.parent):
            if path.read_text(encoding="utf-8") != before:
                raise InputError(f"{path} changed while the fixes were being applied", "run apply-fix --from again")
            out.manifests.append(commit_file(fix_id, path.parent, path.name, before, after,
                                             {"variant": "from-run", "release": "", "elements_applied": []}))
        if path not in out.files:
            out.files.append(path)
    return out


def _tree_fixes(sites: list[_Site], root: Path, out: FromRun, *, dry_run: bool) -> None:
    """Apply each tree fix once per project its sites are in."""
    done: dict[tuple[str, Path], FixResult] = {}
    for s in sites:
        tree = next((p for p in s.path.parents if _is_tree(p)), None)
        status, detail = "refused", "no project the fix knows holds this file"
        if tree is not None:
            key = (s.fix_id, tree)
            if key not in done:
                done[key] = result = apply_fix(s.fix_id, tree, dry_run=dry_run)
                if isinstance(result, FixApplied):
                    out.diff += result.diff
                    out.files.extend(result.files)
                    if result.manifest_path is not None:
                        out.manifests.append(result.manifest_path)
            result = done[key]
            applied = isinstance(result, FixApplied)
            status = ("dry-run" if dry_run else "applied") if applied else str(getattr(result, "kind", "refused"))
            detail = "" if applied else str(getattr(result, "reason", ""))
            if not applied and status not in ("already-applied", "not-affected"):
                out.refused = True
        where = f"{_relative(s.path, root)}:{s.line}"
        out.outcomes += [Outcome(f.code, f.op, s.fix_id, where, status, detail) for f in s.findings]


def _is_tree(folder: Path) -> bool:
    try:
        detect_target(folder)
    except HloDoctorError:
        return False
    return True
