"""All-or-nothing writes of a fix, with a manifest and byte-exact backups for revert.

Layout inside the target root::

    .hlo-doctor/fixes/<fix>.json          the manifest (variant, per-file hashes and modes)
    .hlo-doctor/fixes/<fix>.backup/<rel>  the original bytes of every file the fix changed
    .hlo-doctor/fixes/<fix>.journal.json  only while a run is committing (see journal.py)

An apply or a revert: check every file and folder is writable; stage (new contents in temporary files
beside their destinations, copies of the current bytes, the backups, the next manifest); write the
journal; rename. A failure while staging removes what was staged; a failure while renaming rolls the
files back; a killed run is finished or rolled back by the next one (:func:`recover`). Every path is
reached without following symbolic links (safe_io.py) and every path read from a manifest must be a
file the fix edits.

Read-only detection: root bypasses permission bits, and ``os.access`` answers yes to root too. So a
file or folder whose mode has no write bit at all is treated as read-only whoever runs the command
(a deliberate policy, testable with ``chmod``), and on top of that every file is opened for append and
a temporary file is created in every folder before anything is renamed, which catches read-only
mounts and immutable files, for root as well.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.fixes.journal import FIXES_PARTS, FileChange, Journal, Staged, remove_backups, sha256
from hlo_doctor.fixes.safe_io import Dir, open_dir, open_parent, remove_empty

__all__ = [
    "FileChange",
    "backup_dir",
    "check_writable",
    "manifest_path",
    "read_manifest",
    "read_target",
    "recover",
    "revert_files",
    "sha256",
    "write_files",
]

MANIFEST_DIR = Path(*FIXES_PARTS)
_SHA = re.compile(r"^[0-9a-f]{64}$")


def manifest_path(root: Path, fix_id: str) -> Path:
    """Where the manifest of ``fix_id`` lives in a target rooted at ``root``."""
    return root / MANIFEST_DIR / f"{fix_id}.json"


def backup_dir(root: Path, fix_id: str) -> Path:
    """Where the original bytes of ``fix_id``'s files are kept."""
    return root / MANIFEST_DIR / f"{fix_id}.backup"


def _backups_rel(fix_id: str) -> str:
    return f"{MANIFEST_DIR.as_posix()}/{fix_id}.backup"


def _manifest_rel(fix_id: str) -> str:
    return f"{MANIFEST_DIR.as_posix()}/{fix_id}.json"


def read_target(root: Path, rel: str) -> bytes:
    """The bytes of ``root/rel``, reached without following links."""
    d, name = open_parent(root, rel)
    with d:
        return d.read(name)


def read_manifest(root: Path, fix_id: str, allowed: set[str] | None = None) -> dict[str, Any] | None:
    """The manifest of ``fix_id`` in ``root``, validated, or None when there is none.

    Every entry's ``path`` must be a relative path inside the target (no ``..``, no absolute path, no
    NUL) and, given ``allowed``, one of the files the fix edits; anything else is an
    :class:`InputError` and nothing is changed.
    """
    path = manifest_path(root, fix_id)
    try:
        folder = open_dir(root, FIXES_PARTS)
    except FileNotFoundError:
        return None
    with folder:
        if folder.lstat(path.name) is None:
            return None
        try:
            data = json.loads(folder.read(path.name).decode("utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"manifest {path} is unreadable ({exc})", "restore it or remove it by hand") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise InputError(f"manifest {path} is not a hlo-doctor fix manifest", "restore it or remove it by hand")
    for i, entry in enumerate(data["files"]):
        problem = _entry_problem(entry, allowed)
        if problem:
            raise InputError(f"manifest {path}: entry {i + 1} {problem}",
                             "the manifest was edited or planted; restore it or remove it by hand; nothing was changed")
    return data


def _entry_problem(entry: Any, allowed: set[str] | None) -> str:
    if not isinstance(entry, dict):
        return "is not an object"
    rel = entry.get("path")
    if not isinstance(rel, str) or not rel:
        return f"has no valid path ({rel!r})"
    parts = rel.split("/")
    if rel.startswith("/") or "\0" in rel or "\\" in rel or any(p in ("", ".", "..") for p in parts):
        return f"has a path outside the target ({rel!r})"
    if allowed is not None and rel not in allowed:
        return f"names {rel!r}, which is not a file this fix edits"
    for key in ("original_sha256", "applied_sha256"):
        if not isinstance(entry.get(key), str) or not _SHA.match(entry[key]):
            return f"has no valid {key}"
    if "mode" in entry and (not isinstance(entry["mode"], int) or not 0 <= entry["mode"] <= 0o7777):
        return "has no valid mode"
    return ""


def check_writable(root: Path, rels: Sequence[str]) -> None:
    """Raise :class:`InputError` naming the first file or folder that cannot be rewritten."""
    for rel in rels:
        d, name = open_parent(root, rel)
        with d:
            path = d.path / name
            st = d.lstat(name)
            if st is None:
                raise InputError(f"cannot read {path} (No such file or directory)", "check the path")
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
                d.read(name)  # raises the symbolic-link error
            if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
                raise InputError(
                    f"{path} is read-only (mode {stat.filemode(st.st_mode)})",
                    "make it writable (chmod u+w) or apply the fix to a copy; nothing was changed",
                )
            try:
                os.close(os.open(name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d.fd))
            except OSError as exc:
                raise InputError(
                    f"{path} cannot be written ({exc.strerror})", "apply the fix to a writable copy; nothing was changed"
                ) from exc
            folder_mode = os.fstat(d.fd).st_mode
            if not folder_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
                raise InputError(
                    f"folder {d.path} is read-only (mode {stat.filemode(folder_mode)})",
                    "make it writable or apply the fix to a copy; nothing was changed",
                )
            try:
                d.unlink(d.write_temp("probe", b"", 0o600))
            except OSError as exc:
                raise InputError(
                    f"folder {d.path} is not writable ({exc.strerror})",
                    "apply the fix to a writable copy; nothing was changed",
                ) from exc


def recover(root: Path, fix_id: str, allowed: set[str]) -> str:
    """Finish or roll back a run that was killed while committing; say which ("" when none was)."""
    journal = Journal.load(root, fix_id, allowed)
    if journal is None:
        return ""
    what = "apply-fix" if journal.op == "apply" else "revert"
    if journal.can_finish():
        journal.roll_forward(_backups_rel(fix_id), _manifest_rel(fix_id))
        return f"an interrupted {what} of {fix_id} was found and finished ({len(journal.entries)} file(s))"
    journal.roll_back(_backups_rel(fix_id))
    return (f"an interrupted {what} of {fix_id} was found and rolled back: its files are as they were "
            "before it ran")


class _Staging:
    """What a run has staged so far, so that a failure before the commit point removes all of it."""

    def __init__(self, root: Path, fix_id: str) -> None:
        self.root, self.fix_id = root, fix_id
        self.entries: list[Staged] = []
        self.new_backups: list[str] = []
        self.created: list[Path] = []
        self.manifest_next: str | None = None

    def stage(self, folder: Dir, change: FileChange) -> None:
        d, name = open_parent(self.root, change.rel)
        with d:
            temp = d.write_temp(name, change.after, change.mode)
        try:
            saved = folder.write_temp(f"{self.fix_id}.before", change.before, change.mode)
        except BaseException:
            with open_parent(self.root, change.rel)[0] as d2:
                d2.unlink(temp)
            raise
        self.entries.append(Staged(change.rel, sha256(change.before), sha256(change.after), temp, saved))

    def backup(self, change: FileChange) -> None:
        d, name = open_parent(self.root, f"{_backups_rel(self.fix_id)}/{change.rel}", create=True)
        with d:
            self.created.extend(d.created)
            d.write_atomic(name, change.before)
        self.new_backups.append(change.rel)

    def discard(self, folder: Dir) -> None:
        for e in self.entries:
            with open_parent(self.root, e.rel)[0] as d:
                d.unlink(e.temp)
            folder.unlink(e.saved)
        if self.manifest_next is not None:
            folder.unlink(self.manifest_next)
        remove_backups(self.root, _backups_rel(self.fix_id), self.new_backups)
        remove_empty(self.root, self.created)


def _commit(root: Path, fix_id: str, op: str, changes: Sequence[FileChange], manifest_doc: dict[str, Any] | None,
            backups: Sequence[FileChange] = (), drop_backups: Sequence[str] = ()) -> None:
    """Stage ``changes`` (and ``backups``), write the journal, run it (see the module docstring)."""
    folder = open_dir(root, FIXES_PARTS, create=True)
    staging = _Staging(root, fix_id)
    staging.created.extend(folder.created)
    try:
        for change in changes:
            staging.stage(folder, change)
        for change in backups:
            staging.backup(change)
        if manifest_doc is not None:
            staging.manifest_next = folder.write_temp(
                f"{fix_id}.json", (json.dumps(manifest_doc, indent=2) + "\n").encode(), 0o644)
        journal = Journal(root, fix_id, op, staging.entries, staging.manifest_next, manifest_doc is None,
                          staging.new_backups, drop_backups)
        journal.write()
    except BaseException as exc:
        staging.discard(folder)
        folder.close()
        if isinstance(exc, OSError):
            raise InputError(f"could not prepare the fix in {root} ({exc})", "nothing was changed") from exc
        raise
    folder.close()
    journal.run(_backups_rel(fix_id), _manifest_rel(fix_id))


def write_files(root: Path, fix_id: str, changes: Sequence[FileChange], meta: Mapping[str, Any],
                allowed: set[str]) -> Path:
    """Write every change or none; return the manifest path.

    When a manifest already exists (completing or upgrading an earlier run), the earliest original
    bytes are kept, so a revert always returns to the tree as it was before hlo-doctor touched it.
    """
    check_writable(root, [c.rel for c in changes])
    existing = read_manifest(root, fix_id, allowed)
    prior: dict[str, dict[str, Any]] = {e["path"]: e for e in existing["files"]} if existing else {}
    entries: dict[str, dict[str, Any]] = {}
    for c in changes:
        original = str(prior[c.rel]["original_sha256"]) if c.rel in prior else sha256(c.before)
        entries[c.rel] = {"path": c.rel, "original_sha256": original, "applied_sha256": sha256(c.after),
                          "mode": stat.S_IMODE(c.mode)}
    # Files of an earlier run that this run leaves alone stay in the manifest.
    for rel, entry in prior.items():
        entries.setdefault(rel, {"path": rel, "original_sha256": entry["original_sha256"],
                                 "applied_sha256": entry["applied_sha256"], "mode": int(entry.get("mode", 0o644))})
    document = {
        **dict(meta),
        "fix": fix_id,
        "state": "applied",
        "backup": _backups_rel(fix_id),
        "files": [entries[rel] for rel in sorted(entries)],
    }
    _commit(root, fix_id, "apply", changes, document, backups=[c for c in changes if c.rel not in prior])
    return manifest_path(root, fix_id)


def revert_files(root: Path, fix_id: str, manifest: Mapping[str, Any]) -> tuple[list[str], list[str], dict[str, bytes]]:
    """Restore the original bytes listed in ``manifest``; return (restored files, problems, bytes before).

    When ``problems`` is not empty nothing was changed: a file differs from what the fix wrote, or a
    backup is missing or corrupt.
    """
    problems: list[str] = []
    plan: list[FileChange] = []
    for entry in manifest["files"]:
        rel = entry["path"]
        try:
            d, name = open_parent(root, rel)
            with d:
                current = d.read(name)
                mode = os.stat(name, dir_fd=d.fd, follow_symlinks=False).st_mode
        except OSError as exc:
            problems.append(f"{rel}: unreadable ({exc.strerror})")
            continue
        current_sha = sha256(current)
        if current_sha == entry["original_sha256"]:
            continue  # already back to the original
        if current_sha != entry["applied_sha256"] and manifest.get("state") == "applied":
            problems.append(f"{rel}: changed since the fix was applied")
            continue
        backup = backup_dir(root, fix_id) / rel
        try:
            original = read_target(root, f"{_backups_rel(fix_id)}/{rel}")
        except OSError:
            problems.append(f"{rel}: backup {backup} is missing")
            continue
        if sha256(original) != entry["original_sha256"]:
            problems.append(f"{rel}: backup {backup} does not match the recorded hash")
            continue
        plan.append(FileChange(rel, current, original, mode))
    if problems:
        return [], problems, {}
    check_writable(root, [c.rel for c in plan])
    _commit(root, fix_id, "revert", plan, None, drop_backups=[e["path"] for e in manifest["files"]])
    return [c.rel for c in plan], [], {c.rel: c.before for c in plan}
