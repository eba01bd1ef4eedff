"""Applying a file fix to one Python file: every site or none, through the fixes' transaction.

The file's folder is the transaction's root (``.hlo-doctor/fixes/`` beside the file holds the
manifest, the backup and, while committing, the journal); each (fix, file) pair has its own manifest
(``<fix>--<file name>.json``), so two fixes of one file, or one fix of two files, revert apart. The
same lock, journal, backups and no-link rules as the bundled tree fixes (docs/security.md).

Sites are applied one after the other on the text in memory; the line of each later site is carried
through the earlier edits (a line an earlier edit changed is reported, not guessed).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hlo_doctor import __version__
from hlo_doctor.core.errors import InputError
from hlo_doctor.fixes.base import ElementStatus, FixApplied, FixRefused, FixResult, FixSkipped, OutcomeFields
from hlo_doctor.fixes.catalog import load_source_fix
from hlo_doctor.fixes.journal import Journal, sha256
from hlo_doctor.fixes.safe_io import target_lock
from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceFix
from hlo_doctor.fixes.transaction import (
    FileChange,
    manifest_path,
    read_manifest,
    read_target,
    recover,
    revert_files,
    write_files,
)

__all__ = ["FILE_KIND", "SiteRun", "apply_source_fix", "commit_file", "map_line", "revert_source_fix", "run_sites",
           "transaction_key", "unified_diff"]

FILE_KIND = "python file"


def transaction_key(fix_id: str, name: str) -> str:
    """The name of the (fix, file) manifest: ``donate-state--decode.py`` (other characters replaced)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    if safe != name or len(safe) > 40:
        safe = f"{safe[:30]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return f"{fix_id}--{safe}"


def map_line(old: str, new: str, line: int) -> int | None:
    """Where ``line`` of ``old`` is in ``new`` (None when an edit changed that line)."""
    a, b = old.splitlines(), new.splitlines()
    for tag, i1, i2, j1, _ in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal" and i1 <= line - 1 < i2:
            return j1 + (line - 1 - i1) + 1
    return None


@dataclass
class SiteRun:
    """What running a fix's sites on a text gave: the new text, the edits, the sites left and why."""

    text: str
    edits: list[SiteEdit] = field(default_factory=list)
    refused: list[tuple[int | None, NotApplicable]] = field(default_factory=list)
    unsafe_left: list[SiteEdit] = field(default_factory=list)
    # Per site, in order: (status, words): changed, unsafe (left: --unsafe not given), no-pattern,
    # refused, already-applied.
    outcomes: list[tuple[str, str]] = field(default_factory=list)


def run_sites(fix: SourceFix, text: str, sites: Sequence[tuple[int | None, Hint]], *, unsafe: bool,
              base: str | None = None) -> SiteRun:
    """Apply ``fix`` at each (line, hint) of ``sites`` (lines of ``base``, default ``text``), in turn."""
    base = text if base is None else base
    run = SiteRun(text)
    for line, hint in sites:
        at = line
        if line is not None and base != run.text:
            at = map_line(base, run.text, line)
            if at is None:
                gone = NotApplicable(f"line {line} was changed by an earlier edit of this run", "already-applied")
                run.refused.append((line, gone))
                run.outcomes.append((gone.kind, gone.reason))
                continue
        outcome = fix.rewrite(run.text, at, hint)
        if isinstance(outcome, NotApplicable):
            run.refused.append((line, outcome))
            run.outcomes.append((outcome.kind, outcome.reason))
            continue
        if not outcome.safe and not unsafe:
            run.unsafe_left.extend(e for e in outcome.edits if not e.safe)
            run.outcomes.append(("unsafe", "; ".join(f"{e.what} ({e.note})" for e in outcome.edits if not e.safe)))
            continue
        shift = (line - at) if line is not None and at is not None else 0
        run.edits.extend(dataclasses.replace(e, line=e.line + shift) for e in outcome.edits)
        run.outcomes.append(("changed", "; ".join(e.what for e in outcome.edits)))
        run.text = outcome.text
    return run


def _where(path: Path) -> tuple[Path, str]:
    """(root folder, file name): the file itself is never resolved through a link."""
    absolute = Path(os.path.abspath(path))
    if not absolute.exists():
        raise InputError(f"{path} does not exist", "pass the Python file a finding names")
    if absolute.is_dir():
        raise InputError(f"{path} is a folder", "pass one Python file (FILE.py or FILE.py:LINE), or --target for a "
                                                "project fix")
    return absolute.parent.resolve(), absolute.name


def _read(root: Path, name: str) -> str:
    try:
        return read_target(root, name).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{root / name} is not UTF-8 text", "pass a Python source file; nothing was changed") from exc
    except OSError as exc:
        raise InputError(f"cannot read {root / name} ({exc.strerror})", "check the path and its permissions") from exc


def _elements(fix_id: str, name: str, edits: Sequence[SiteEdit], state: str) -> tuple[ElementStatus, ...]:
    return tuple(ElementStatus(element=f"{fix_id}@{e.line}", part=1, title=e.what, state=state,  # type: ignore[arg-type]
                               where=f"{name}:{e.line}",
                               detail=("safe" if e.safe else "unsafe") + (f": {e.note}" if e.note else ""))
                 for e in edits)


def _refusal(fix_id: str, name: str, run: SiteRun, common: OutcomeFields) -> FixResult:
    """The outcome when no site was changed."""
    if run.unsafe_left:
        notes = "; ".join(f"line {e.line}: {e.what} ({e.note})" for e in run.unsafe_left)
        return FixRefused(reason=f"{fix_id} is unsafe here: {notes}; pass --unsafe to apply it (then verify)",
                          kind="unsafe", elements=_elements(fix_id, name, run.unsafe_left, "original"),
                          fix_id=fix_id, target_kind=FILE_KIND)
    kinds = {r.kind for _, r in run.refused}
    reasons = "; ".join((f"{name}:{line}: " if line else f"{name}: ") + r.reason for line, r in run.refused)
    if kinds == {"already-applied"}:
        return FixSkipped(reason=f"already applied: {reasons}", kind="already-applied", **common)
    kind = "refused" if "refused" in kinds else "anchors-missing"
    return FixRefused(reason=f"{reasons}; nothing was changed", kind=kind,
                      missing_anchors=tuple(r.reason for _, r in run.refused if r.kind == "no-pattern"), **common)


def commit_file(fix_id: str, root: Path, name: str, old: str, new: str, meta: dict[str, object]) -> Path:
    """Write ``new`` over ``old`` as one transaction (the caller holds the lock); the manifest's path."""
    key = transaction_key(fix_id, name)
    mode = os.stat(root / name, follow_symlinks=False).st_mode
    return write_files(root, key, [FileChange(name, old.encode("utf-8"), new.encode("utf-8"), mode)],
                       {"tool": f"hlo-doctor {__version__}", "target_kind": FILE_KIND, **meta}, {name})


def unified_diff(name: str, old: str, new: str) -> str:
    """The diff of one file, with ``a/``/``b/`` prefixes (``patch -p1`` in its folder)."""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"a/{name}", f"b/{name}"))


def apply_source_fix(fix_id: str, path: Path, sites: Sequence[tuple[int | None, Hint]] = ((None, Hint()),), *,
                     dry_run: bool = False, unsafe: bool = False) -> FixResult:
    """Apply file fix ``fix_id`` to ``path`` at ``sites`` ((line, hint); line None: the whole file).

    ``FixApplied`` (every site changed, or with notes for the sites left), ``FixSkipped`` (already
    applied), ``FixRefused`` (no site holds the pattern, the pattern is there but unsafe to change,
    or the fix is unsafe and ``unsafe`` is false): nothing is written unless a site changed.
    """
    fix = load_source_fix(fix_id)
    root, name = _where(Path(path))
    key = transaction_key(fix_id, name)
    common: OutcomeFields = {"fix_id": fix_id, "target_kind": FILE_KIND, "release": ""}
    if dry_run:
        if Journal.load(root, key, {name}) is not None:
            raise InputError(f"an interrupted hlo-doctor run left a journal beside {root / name}",
                             "run apply-fix without --dry-run (or --revert) first: it finishes or rolls it back")
        return _apply(fix, root, name, sites, dry_run=True, unsafe=unsafe, common=common)
    with target_lock(root):
        recovered = recover(root, key, {name})
        result = _apply(fix, root, name, sites, dry_run=False, unsafe=unsafe, common=common)
    return dataclasses.replace(result, recovered=recovered) if recovered else result


def _apply(fix: SourceFix, root: Path, name: str, sites: Sequence[tuple[int | None, Hint]], *, dry_run: bool,
           unsafe: bool, common: OutcomeFields) -> FixResult:
    text = _read(root, name)
    manifest = read_manifest(root, transaction_key(fix.fix_id, name), {name})
    if manifest is not None and any(e["applied_sha256"] == sha256(text.encode("utf-8")) for e in manifest["files"]):
        return FixSkipped(reason=f"already applied by hlo-doctor to {name} (--revert undoes it)", **common)
    run = run_sites(fix, text, sites, unsafe=unsafe or dry_run)
    if not run.edits:
        return _refusal(fix.fix_id, name, run, common)
    safe = all(e.safe for e in run.edits)
    notes = tuple(f"{name}:{line}: not changed: {r.reason}" for line, r in run.refused) + tuple(
        f"line {e.line}: unsafe: {e.note}" for e in run.edits if not e.safe)
    applied = FixApplied(
        files=(root / name,), diff=unified_diff(name, text, run.text), manifest_path=None,
        variant="safe" if safe else "unsafe", elements=_elements(fix.fix_id, name, run.edits, "original"),
        notes=notes, applied=tuple(f"{fix.fix_id}@{e.line}" for e in run.edits), dry_run=dry_run,
        fix_id=fix.fix_id, target_kind=FILE_KIND)
    if dry_run:
        return applied
    written = commit_file(fix.fix_id, root, name, text, run.text,
                          {"variant": applied.variant, "release": "", "elements_applied": list(applied.applied)})
    return dataclasses.replace(applied, manifest_path=written)


def revert_source_fix(fix_id: str, path: Path) -> FixResult:
    """Put back the bytes ``fix_id`` found in ``path`` before an earlier apply."""
    load_source_fix(fix_id)
    root, name = _where(Path(path))
    key = transaction_key(fix_id, name)
    common: OutcomeFields = {"fix_id": fix_id, "target_kind": FILE_KIND, "release": ""}
    with target_lock(root):
        recovered = recover(root, key, {name})
        manifest = read_manifest(root, key, {name})
        if manifest is None:
            result: FixResult = FixSkipped(reason=f"nothing to revert: no manifest at {manifest_path(root, key)}",
                                           kind="nothing-to-revert", **common)
        else:
            before = _read(root, name)
            restored, problems, _ = revert_files(root, key, manifest)
            if problems:
                result = FixRefused(reason="cannot revert, nothing was changed: " + "; ".join(problems),
                                    kind="modified", **common)
            else:
                result = FixApplied(files=tuple(root / r for r in restored), diff=unified_diff(name, before, _read(root, name)),
                                    manifest_path=None, variant=str(manifest.get("variant", "")), reverted=True, **common)
    return dataclasses.replace(result, recovered=recovered) if recovered else result
