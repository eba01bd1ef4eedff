"""All-or-nothing writes of a fix, with a manifest and byte-exact backups for revert.

Layout inside the target root::

    .hlo-doctor/fixes/<fix>.json          the manifest (state, variant, per-file hashes)
    .hlo-doctor/fixes/<fix>.backup/<rel>  the original bytes of every file the fix changed

Order of a write: check every file and folder is writable; write every new content to a temporary file
beside its destination; write the backups; write the manifest as ``pending``; rename the temporary
files over the originals (a rename is atomic on one filesystem); mark the manifest ``applied``. A
failure before the renames changes nothing; a failure between renames puts back the files already
renamed from the bytes held in memory. A ``pending`` manifest left by a crash is still revertable.

Read-only detection: root bypasses permission bits, and ``os.access`` answers yes to root too. So a
file or folder whose mode has no write bit at all is treated as read-only whoever runs the command
(a deliberate policy, testable with ``chmod``), and on top of that every file is opened for append and
a temporary file is created in every folder before anything is renamed, which catches read-only
mounts and immutable files, for root as well.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import InputError

MANIFEST_DIR = Path(".hlo-doctor") / "fixes"
_TMP_SUFFIX = ".hlo-doctor-tmp"


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def manifest_path(root: Path, fix_id: str) -> Path:
    """Where the manifest of ``fix_id`` lives in a target rooted at ``root``."""
    return root / MANIFEST_DIR / f"{fix_id}.json"


def backup_dir(root: Path, fix_id: str) -> Path:
    """Where the original bytes of ``fix_id``'s files are kept."""
    return root / MANIFEST_DIR / f"{fix_id}.backup"


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One changed file: its path relative to the root, the hashes before and after, its mode."""

    path: str
    original_sha256: str
    applied_sha256: str
    mode: int


def read_manifest(root: Path, fix_id: str) -> dict[str, Any] | None:
    """The manifest of ``fix_id`` in ``root``, or None when there is none."""
    path = manifest_path(root, fix_id)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"manifest {path} is unreadable ({exc})", "restore it or remove it by hand") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise InputError(f"manifest {path} is not a hlo-doctor fix manifest", "restore it or remove it by hand")
    return data


def check_writable(files: list[Path]) -> None:
    """Raise :class:`InputError` naming the first file or folder that cannot be rewritten.

    Works as root too (see the module docstring): mode bits are honoured as a policy, and the real
    checks are an append-open of each file and a temporary file in each folder.
    """
    folders: dict[Path, None] = {}
    for path in files:
        try:
            st = path.stat()
        except OSError as exc:
            raise InputError(f"cannot read {path} ({exc.strerror})", "check the path") from exc
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise InputError(
                f"{path} is read-only (mode {stat.filemode(st.st_mode)})",
                "make it writable (chmod u+w) or apply the fix to a copy; nothing was changed",
            )
        try:
            with open(path, "ab"):
                pass
        except OSError as exc:
            raise InputError(
                f"{path} cannot be written ({exc.strerror})", "apply the fix to a writable copy; nothing was changed"
            ) from exc
        folders[path.parent] = None
    for folder in folders:
        st = folder.stat()
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise InputError(
                f"folder {folder} is read-only (mode {stat.filemode(st.st_mode)})",
                "make it writable or apply the fix to a copy; nothing was changed",
            )
        probe = folder / f".probe{_TMP_SUFFIX}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise InputError(
                f"folder {folder} is not writable ({exc.strerror})",
                "apply the fix to a writable copy; nothing was changed",
            ) from exc


def _write_temp_beside(path: Path, data: bytes, mode: int) -> Path:
    tmp = path.with_name(f".{path.name}{_TMP_SUFFIX}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, stat.S_IMODE(mode))
    return tmp


def _atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temp_beside(path, data, mode)
    os.replace(tmp, path)


def write_files(
    root: Path,
    fix_id: str,
    changes: Mapping[Path, tuple[bytes, bytes]],
    meta: Mapping[str, Any],
) -> Path:
    """Write every ``path -> (old, new)`` in ``changes`` or none; return the manifest path.

    When a manifest already exists (completing or upgrading an earlier run), the earliest original
    bytes are kept, so a revert always returns to the tree as it was before hlo-doctor touched it.
    """
    paths = list(changes)
    check_writable(paths)
    existing = read_manifest(root, fix_id)
    prior: dict[str, dict[str, Any]] = {e["path"]: e for e in existing["files"]} if existing else {}

    entries: list[ManifestEntry] = []
    temps: list[tuple[Path, Path]] = []
    created_backups: list[Path] = []
    manifest = manifest_path(root, fix_id)
    manifest_existed = manifest.exists()
    try:
        for path, (old, new) in changes.items():
            rel = path.relative_to(root).as_posix()
            mode = path.stat().st_mode
            temps.append((path, _write_temp_beside(path, new, mode)))
            if rel in prior:
                original_sha = str(prior[rel]["original_sha256"])
            else:
                original_sha = sha256(old)
                backup = backup_dir(root, fix_id) / rel
                _atomic_write(backup, old)
                created_backups.append(backup)
            entries.append(ManifestEntry(rel, original_sha, sha256(new), stat.S_IMODE(mode)))
        # Files of an earlier run that this run leaves alone stay in the manifest.
        touched = {e.path for e in entries}
        for rel, entry in prior.items():
            if rel not in touched:
                entries.append(
                    ManifestEntry(rel, entry["original_sha256"], entry["applied_sha256"], int(entry.get("mode", 0o644)))
                )
        document = {
            **dict(meta),
            "fix": fix_id,
            "state": "pending",
            "backup": backup_dir(root, fix_id).relative_to(root).as_posix(),
            "files": [
                {"path": e.path, "original_sha256": e.original_sha256, "applied_sha256": e.applied_sha256, "mode": e.mode}
                for e in sorted(entries, key=lambda e: e.path)
            ],
        }
        _atomic_write(manifest, (json.dumps(document, indent=2) + "\n").encode())
    except BaseException as exc:
        _discard_staging(root, fix_id, manifest, manifest_existed, temps, created_backups)
        if isinstance(exc, OSError):
            raise InputError(f"could not prepare the fix in {root} ({exc})", "nothing was changed") from exc
        raise

    done: list[Path] = []
    try:
        for path, tmp in temps:
            os.replace(tmp, path)
            done.append(path)
    except BaseException as exc:
        # Put back what was already renamed, from the bytes in memory.
        for path in done:
            old_bytes = changes[path][0]
            _atomic_write(path, old_bytes, path.stat().st_mode)
        _discard_staging(root, fix_id, manifest, manifest_existed, temps)
        if isinstance(exc, OSError):
            raise InputError(f"could not write the fix into {root} ({exc})", "nothing was changed") from exc
        raise
    document["state"] = "applied"
    _atomic_write(manifest, (json.dumps(document, indent=2) + "\n").encode())
    return manifest


def revert_files(root: Path, fix_id: str, manifest: Mapping[str, Any]) -> tuple[list[Path], list[str]]:
    """Restore the original bytes listed in ``manifest``; return (restored files, problems).

    When ``problems`` is not empty nothing was changed: a file differs from what the fix wrote, or a
    backup is missing or corrupt.
    """
    problems: list[str] = []
    plan: list[tuple[Path, bytes, int]] = []
    backups = backup_dir(root, fix_id)
    for entry in manifest["files"]:
        path = root / entry["path"]
        backup = backups / entry["path"]
        try:
            current = path.read_bytes()
        except OSError as exc:
            problems.append(f"{entry['path']}: unreadable ({exc.strerror})")
            continue
        current_sha = sha256(current)
        if current_sha == entry["original_sha256"]:
            continue  # already back to the original (a crash between renames)
        if current_sha != entry["applied_sha256"] and manifest.get("state") == "applied":
            problems.append(f"{entry['path']}: changed since the fix was applied")
            continue
        try:
            original = backup.read_bytes()
        except OSError:
            problems.append(f"{entry['path']}: backup {backup} is missing")
            continue
        if sha256(original) != entry["original_sha256"]:
            problems.append(f"{entry['path']}: backup {backup} does not match the recorded hash")
            continue
        plan.append((path, original, path.stat().st_mode))
    if problems:
        return [], problems
    check_writable([p for p, _, _ in plan])
    temps = [(path, _write_temp_beside(path, data, mode)) for path, data, mode in plan]
    for path, tmp in temps:
        os.replace(tmp, path)
    manifest_path(root, fix_id).unlink(missing_ok=True)
    shutil.rmtree(backups, ignore_errors=True)
    _remove_empty_dirs(root, manifest_path(root, fix_id).parent)
    return [p for p, _, _ in plan], []


def _remove_empty_dirs(root: Path, start: Path) -> None:
    """Remove ``start`` and its parents up to (not including) ``root`` while they are empty."""
    folder = start
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _discard_staging(
    root: Path, fix_id: str, manifest: Path, manifest_existed: bool,
    temps: list[tuple[Path, Path]], backups: list[Path] | tuple[Path, ...] = (),
) -> None:
    """Remove what a failed transaction staged: temporary files, new backups, and (when this run
    created them) the manifest and its backup folder, so the target is left as it was."""
    for _, tmp in temps:
        tmp.unlink(missing_ok=True)
    for backup in backups:
        backup.unlink(missing_ok=True)
    if not manifest_existed:
        manifest.unlink(missing_ok=True)
        shutil.rmtree(backup_dir(root, fix_id), ignore_errors=True)
        _remove_empty_dirs(root, manifest.parent)
