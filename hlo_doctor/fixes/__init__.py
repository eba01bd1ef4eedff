"""Bundled source fixes: a registry of codemods (libcst) and the transaction that applies them.

Public API::

    available_fixes() -> tuple[str, ...]
    get_fix(fix_id) -> Fix
    apply_fix(fix_id, target, *, variant="full", dry_run=False, complete=False) -> FixResult
    fix_applies(fix_id, target, *, variant="full") -> bool
    revert_fix(fix_id, target) -> FixResult
    patched_copy(fix_id, source_tree, dest, *, variant="full") -> Path

``FixResult`` is ``FixApplied | FixSkipped | FixRefused`` (values, not exceptions). Input that cannot
be used at all (a missing path, a file instead of a folder, an unknown project, a read-only file)
raises :class:`hlo_doctor.core.errors.InputError` with one line, and nothing is changed.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import shutil
from pathlib import Path

from hlo_doctor import __version__
from hlo_doctor.core.errors import HloDoctorError, InputError
from hlo_doctor.fixes.base import (
    ElementStatus,
    Fix,
    FixApplied,
    FixOutcome,
    FixRefused,
    FixResult,
    FixSkipped,
    OutcomeFields,
    Plan,
)
from hlo_doctor.fixes.bf16_greedy_sampler import Bf16GreedySampler
from hlo_doctor.fixes.journal import Journal
from hlo_doctor.fixes.safe_io import target_lock
from hlo_doctor.fixes.targets import Target, detect_target
from hlo_doctor.fixes.transaction import (
    FileChange,
    manifest_path,
    read_manifest,
    read_target,
    recover,
    revert_files,
    write_files,
)

__all__ = [
    "ElementStatus",
    "Fix",
    "FixApplied",
    "FixOutcome",
    "FixRefused",
    "FixResult",
    "FixSkipped",
    "Target",
    "apply_fix",
    "available_fixes",
    "detect_target",
    "fix_applies",
    "get_fix",
    "patched_copy",
    "revert_fix",
]
# `apply_fix`, `revert_fix` and `patched_copy` take ``str`` paths as well as ``Path``.


_REGISTRY: dict[str, Fix] = {fix.fix_id: fix for fix in (Bf16GreedySampler(),)}


def available_fixes() -> tuple[str, ...]:
    """The ids of the bundled fixes."""
    return tuple(sorted(_REGISTRY))


def get_fix(fix_id: str) -> Fix:
    """The fix ``fix_id``; :class:`InputError` naming the known ones when there is no such fix."""
    try:
        return _REGISTRY[fix_id]
    except KeyError:
        raise InputError(f"unknown fix '{fix_id}'", f"available: {', '.join(available_fixes())}") from None


def _allowed(target: Target) -> set[str]:
    """The paths (relative to the root) of the files the fix edits: all a manifest may name."""
    return {target.rel(path) for _, path in target.files}


def _read_sources(target: Target) -> dict[str, str]:
    sources: dict[str, str] = {}
    for role, path in target.files:
        try:
            sources[role] = read_target(target.root, target.rel(path)).decode("utf-8")
        except OSError as exc:
            raise InputError(f"cannot read {path} ({exc.strerror})", "check the permissions of the target") from exc
        except UnicodeDecodeError as exc:
            raise InputError(f"{path} is not UTF-8 text", "the target does not look like Python source") from exc
    return sources


def _unified_diff(target: Target, path: Path, old: str, new: str) -> str:
    rel = target.rel(path)
    return "".join(
        difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}")
    )


def _judge(fix: Fix, tree: Target, plan: Plan, variant: str, complete: bool) -> FixSkipped | FixRefused | None:
    """Why the plan is not applied (a skip or a refusal), or None when it is to be applied."""
    common: OutcomeFields = {
        "target_kind": tree.kind, "release": tree.release, "fix_id": fix.fix_id, "elements": plan.elements,
    }
    if plan.unfinishable:
        return FixRefused(reason=plan.unfinishable, missing_anchors=plan.missing, kind="half-fixed", **common)
    if plan.not_affected:
        return FixSkipped(reason=f"not affected: {plan.not_affected}", kind="not-affected", **common)
    if plan.missing:
        return FixRefused(
            reason=f"the code does not match the fix: {len(plan.missing)} anchor(s) not found; nothing was changed",
            missing_anchors=plan.missing,
            kind="anchors-missing",
            **common,
        )
    if plan.unsafe:
        return FixRefused(
            reason="the full variant returns no logits from sample() without logprobs, but: " + "; ".join(plan.unsafe)
            + " - use --variant upstream",
            kind="unsafe",
            **common,
        )
    if not plan.pending:
        applied_by = read_manifest(tree.root, fix.fix_id)
        how = f" (by hlo-doctor, variant {applied_by.get('variant')})" if applied_by else ""
        return FixSkipped(reason=f"already applied{how}: every element of the {variant} variant is present", **common)
    if plan.done and not complete and not plan.upgrade:
        return FixRefused(reason=fix.explain_half_fixed(plan, variant), kind="half-fixed", **common)
    return None


def apply_fix(
    fix_id: str,
    target: Path,
    *,
    variant: str = "full",
    dry_run: bool = False,
    complete: bool = False,
) -> FixResult:
    """Apply ``fix_id`` to the tree at ``target``: every file or none.

    Returns ``FixApplied`` (with the unified diff; nothing written when ``dry_run``), ``FixSkipped``
    (already applied, or the release does not have the pattern) or ``FixRefused`` (anchors not found;
    a half-fixed tree without ``complete``; the full variant's precondition does not hold).
    """
    fix = get_fix(fix_id)
    if variant not in fix.variants:
        raise InputError(f"unknown variant '{variant}' for {fix_id}", f"choose one of: {', '.join(fix.variants)}")
    tree = detect_target(Path(target))
    if dry_run:
        if Journal.load(tree.root, fix_id, _allowed(tree)) is not None:
            raise InputError(f"an interrupted hlo-doctor run left a journal in {tree.root}",
                             "run apply-fix without --dry-run (or --revert) first: it finishes or rolls it back")
        return _apply(fix, tree, variant, dry_run=True, complete=complete)
    with target_lock(tree.root):
        recovered = recover(tree.root, fix_id, _allowed(tree))
        result = _apply(fix, tree, variant, dry_run=False, complete=complete)
    return dataclasses.replace(result, recovered=recovered) if recovered else result


def fix_applies(fix_id: str, target: Path, *, variant: str = "full") -> bool:
    """Whether ``apply_fix(fix_id, target, variant=variant, dry_run=True)`` returns ``FixApplied``.

    The same checks and the same plan, without computing the patched sources (the codemod, half of
    the plan's time): a plan that passes :func:`_judge` is applied whatever its patched texts are.
    Input the dry run would refuse with an error is False here.
    """
    try:
        fix = get_fix(fix_id)
        if variant not in fix.variants:
            return False
        tree = detect_target(Path(target))
        if Journal.load(tree.root, fix_id, _allowed(tree)) is not None:
            return False
        plan = fix.plan(tree, _read_sources(tree), variant, patch=False)
    except HloDoctorError:
        return False
    return _judge(fix, tree, plan, variant, False) is None


def _apply(fix: Fix, tree: Target, variant: str, *, dry_run: bool, complete: bool) -> FixResult:
    sources = _read_sources(tree)
    plan = fix.plan(tree, sources, variant)
    verdict = _judge(fix, tree, plan, variant, complete)
    if verdict is not None:
        return verdict
    half_fixed = bool(plan.done) and not plan.upgrade

    paths = dict(tree.files)
    changes: list[FileChange] = []
    diffs: list[str] = []
    for role, new_text in plan.new_sources:
        old_text = sources[role]
        if new_text == old_text:
            continue
        path = paths[role]
        mode = os.stat(path, follow_symlinks=False).st_mode
        changes.append(FileChange(tree.rel(path), old_text.encode("utf-8"), new_text.encode("utf-8"), mode))
        diffs.append(_unified_diff(tree, path, old_text, new_text))
    notes = plan.notes + (("completed a half-fixed tree",) if half_fixed else ()) + ((plan.upgrade,) if plan.upgrade else ())
    applied = FixApplied(
        files=tuple(tree.root / c.rel for c in changes),
        diff="".join(diffs),
        manifest_path=None,
        target_kind=tree.kind,
        release=tree.release,
        fix_id=fix.fix_id,
        variant=variant,
        completed_partial=half_fixed,
        elements=plan.elements,
        notes=notes,
        applied=plan.pending,
        dry_run=dry_run,
    )
    if dry_run:
        return applied
    manifest = write_files(
        tree.root,
        fix.fix_id,
        changes,
        {
            "tool": f"hlo-doctor {__version__}",
            "variant": variant,
            "target_kind": tree.kind,
            "release": tree.release,
            "elements_applied": list(plan.pending),
        },
        _allowed(tree),
    )
    return dataclasses.replace(applied, manifest_path=manifest)


def revert_fix(fix_id: str, target: Path) -> FixResult:
    """Put back the exact original bytes recorded by an earlier :func:`apply_fix` on ``target``."""
    get_fix(fix_id)
    tree = detect_target(Path(target))
    with target_lock(tree.root):
        recovered = recover(tree.root, fix_id, _allowed(tree))
        result = _revert(fix_id, tree)
    return dataclasses.replace(result, recovered=recovered) if recovered else result


def _revert(fix_id: str, tree: Target) -> FixResult:
    manifest = read_manifest(tree.root, fix_id, _allowed(tree))
    common: OutcomeFields = {"target_kind": tree.kind, "release": tree.release, "fix_id": fix_id}
    if manifest is None:
        return FixSkipped(
            reason=f"nothing to revert: no manifest at {manifest_path(tree.root, fix_id)}",
            kind="nothing-to-revert",
            **common,
        )
    restored, problems, before = revert_files(tree.root, fix_id, manifest)
    if problems:
        return FixRefused(reason="cannot revert, nothing was changed: " + "; ".join(problems), kind="modified", **common)
    diff = "".join(
        _unified_diff(tree, tree.root / rel, before[rel].decode("utf-8", "replace"),
                      read_target(tree.root, rel).decode("utf-8", "replace"))
        for rel in restored
    )
    return FixApplied(
        files=tuple(tree.root / rel for rel in restored),
        diff=diff,
        manifest_path=None,
        target_kind=tree.kind,
        release=tree.release,
        fix_id=fix_id,
        variant=str(manifest.get("variant", "")),
        reverted=True,
    )


def patched_copy(
    fix_id: str, source_tree: Path, dest: Path, *, variant: str = "full", complete: bool = False
) -> Path:
    """Copy ``source_tree`` to ``dest`` and apply ``fix_id`` to the copy; return ``dest``.

    ``dest`` must not exist (or be an empty folder). A source that already carries the fix is copied
    as is; a half-fixed source is finished only with ``complete``. Raises :class:`HloDoctorError`
    when the fix is refused on the copy (the copy is then left in place, unpatched).
    """
    source_tree, dest = Path(source_tree), Path(dest)
    if not source_tree.is_dir():
        raise InputError(f"source tree {source_tree} is not a directory", "pass the engine or tpu-inference tree")
    if dest.exists() and any(dest.iterdir()):
        raise InputError(f"destination {dest} is not empty", "pass a new folder for the patched copy")
    if dest.exists():
        dest.rmdir()
    shutil.copytree(source_tree, dest, ignore=shutil.ignore_patterns("__pycache__", ".hlo-doctor"))
    result = apply_fix(fix_id, dest, variant=variant, complete=complete)
    if isinstance(result, FixRefused):
        raise HloDoctorError(f"{fix_id} cannot be applied to a copy of {source_tree}: {result.reason}",
                             "; ".join(result.missing_anchors))
    return dest
