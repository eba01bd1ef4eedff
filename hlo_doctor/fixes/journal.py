"""The journal: an apply or revert either happens whole, or the next run finishes or undoes it.

A run stages everything first (new contents in temporary files beside their destinations, a copy of
each file's current bytes, the next manifest), then writes the journal
``.hlo-doctor/fixes/<fix>.journal.json`` naming all of it: that write is the commit point. What
follows is renames and removals only, no new data, so a full disk cannot stop it halfway:

    each temporary file -> its destination; the next manifest -> <fix>.json (or, for a revert, the
    manifest and the backups removed); the copies and the journal removed.

A failure inside the run puts the files back from the copies (a rollback) and removes the journal. A
run killed in between leaves the journal; the next apply-fix or --revert on the target finds it and
**finishes** the run when every temporary file is still there, or **rolls it back** from the copies
otherwise, and says which. Everything a journal names is checked before it is used: paths must be
files the fix edits, temporary names must look like the ones hlo-doctor creates.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.fixes.safe_io import Dir, open_dir, open_parent, remove_empty

FIXES_PARTS = (".hlo-doctor", "fixes")
_TEMP_NAME = re.compile(r"^\.[A-Za-z0-9_.-]{1,80}\.[0-9a-f]{16}\.hlo-doctor-tmp$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
# Test hook: "kill-after-rename:N" ends the process, "fail-after-rename:N" raises, after N renames.
FAULT_ENV = "HLO_DOCTOR_INJECT_FAULT"


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file of a run: its path relative to the root, its bytes before and after, its mode."""

    rel: str
    before: bytes
    after: bytes
    mode: int


@dataclass(frozen=True, slots=True)
class Staged:
    """One journal entry: where the new bytes wait and where the old bytes are kept."""

    rel: str
    before_sha256: str
    after_sha256: str
    temp: str
    saved: str


def journal_name(fix_id: str) -> str:
    """The journal's file name inside ``.hlo-doctor/fixes``."""
    return f"{fix_id}.journal.json"


def _fault(renames: int) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    kind, _, count = spec.partition(":")
    if not count.isdigit() or int(count) != renames:
        return
    if kind == "kill-after-rename":
        os._exit(70)
    if kind == "fail-after-rename":
        raise OSError(28, "injected failure after a rename")


class Journal:
    """One run of renames over a target (see the module docstring)."""

    def __init__(self, root: Path, fix_id: str, op: str, entries: Sequence[Staged], manifest_next: str | None,
                 drop_manifest: bool, new_backups: Sequence[str], drop_backups: Sequence[str] = ()) -> None:
        self.root, self.fix_id, self.op = root, fix_id, op
        self.entries = tuple(entries)
        self.manifest_next = manifest_next
        self.drop_manifest = drop_manifest
        # Backups this run created (removed by a rollback) and backups a revert drops once it is done.
        self.new_backups = tuple(new_backups)
        self.drop_backups = tuple(drop_backups)

    # -- the document --------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """The journal as written (sorted keys, one object)."""
        doc = {
            "op": self.op,
            "fix": self.fix_id,
            "files": [{"path": e.rel, "before_sha256": e.before_sha256, "after_sha256": e.after_sha256,
                       "temp": e.temp, "saved": e.saved} for e in self.entries],
            "manifest_next": self.manifest_next,
            "drop_manifest": self.drop_manifest,
            "new_backups": list(self.new_backups),
            "drop_backups": list(self.drop_backups),
        }
        return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def load(cls, root: Path, fix_id: str, allowed: set[str]) -> Journal | None:
        """The journal left by an interrupted run, validated; None when there is none."""
        try:
            folder = open_dir(root, FIXES_PARTS)
        except FileNotFoundError:
            return None
        with folder:
            if folder.lstat(journal_name(fix_id)) is None:
                return None
            where = folder.path / journal_name(fix_id)
            try:
                doc = json.loads(folder.read(journal_name(fix_id)).decode("utf-8"))
                return cls._from_doc(root, fix_id, doc, allowed)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise InputError(f"journal {where} is not valid ({exc})",
                                 "check the files of the target by hand, then remove the journal") from exc

    @classmethod
    def _from_doc(cls, root: Path, fix_id: str, doc: Any, allowed: set[str]) -> Journal:
        if doc["op"] not in ("apply", "revert") or doc["fix"] != fix_id:
            raise ValueError("wrong op or fix")
        entries = []
        for f in doc["files"]:
            if f["path"] not in allowed:
                raise ValueError(f"path {f['path']!r} is not a file this fix edits")
            for key in ("before_sha256", "after_sha256"):
                if not isinstance(f[key], str) or not _SHA.match(f[key]):
                    raise ValueError(f"bad {key}")
            for key in ("temp", "saved"):
                if not isinstance(f[key], str) or not _TEMP_NAME.match(f[key]):
                    raise ValueError(f"bad {key} name {f[key]!r}")
            entries.append(Staged(f["path"], f["before_sha256"], f["after_sha256"], f["temp"], f["saved"]))
        nxt = doc["manifest_next"]
        if nxt is not None and (not isinstance(nxt, str) or not _TEMP_NAME.match(nxt)):
            raise ValueError("bad manifest_next name")
        for key in ("new_backups", "drop_backups"):
            if not isinstance(doc[key], list) or any(b not in allowed for b in doc[key]):
                raise ValueError(f"bad {key}")
        return cls(root, fix_id, doc["op"], entries, nxt, bool(doc["drop_manifest"]), doc["new_backups"],
                   doc["drop_backups"])

    # -- running it ----------------------------------------------------------------------------

    def write(self) -> None:
        """Write the journal (the commit point): from here on the run finishes or is rolled back."""
        with open_dir(self.root, FIXES_PARTS) as folder:
            folder.write_atomic(journal_name(self.fix_id), self.to_json())

    def run(self, backups_rel: str, manifest_rel: str) -> None:
        """Do the journal's renames; on a failure roll back (see the module docstring)."""
        try:
            self.roll_forward(backups_rel, manifest_rel, inject=True)
        except BaseException as exc:
            try:
                self.roll_back(backups_rel)
            except BaseException as again:
                raise InputError(
                    f"{self.op} in {self.root} was interrupted ({exc}) and could not be undone ({again})",
                    "run apply-fix or --revert again: the journal lets it finish or roll back the run",
                ) from again
            if isinstance(exc, OSError):
                raise InputError(f"could not write the fix into {self.root} ({exc})", "nothing was changed") from exc
            raise

    def can_finish(self) -> bool:
        """Whether every file is done or has its temporary file intact (so the run can be finished)."""
        for e in self.entries:
            with _parent(self.root, e.rel) as (d, name):
                current = sha256(d.read(name))
                if current == e.after_sha256:
                    continue
                if current != e.before_sha256 or d.lstat(e.temp) is None or sha256(d.read(e.temp)) != e.after_sha256:
                    return False
        return True

    def roll_forward(self, backups_rel: str, manifest_rel: str, *, inject: bool = False) -> None:
        """Finish the renames, the manifest step and the clean-up (each step is idempotent)."""
        renames = 0
        for e in self.entries:
            with _parent(self.root, e.rel) as (d, name):
                if sha256(d.read(name)) != e.after_sha256:
                    d.replace(e.temp, name)
                    d.sync()
                    renames += 1
                    if inject:
                        _fault(renames)
        with open_dir(self.root, FIXES_PARTS) as folder:
            manifest_name = manifest_rel.rsplit("/", 1)[-1]
            if self.manifest_next is not None and folder.lstat(self.manifest_next) is not None:
                folder.replace(self.manifest_next, manifest_name)
            if self.drop_manifest:
                folder.unlink(manifest_name)
                remove_backups(self.root, backups_rel, self.drop_backups)
            self._clean(folder)

    def roll_back(self, backups_rel: str) -> None:
        """Put every file back to its bytes before the run, from the copies; remove what was staged."""
        for e in self.entries:
            with _parent(self.root, e.rel) as (d, name):
                current = sha256(d.read(name))
                if current != e.before_sha256:
                    if current != e.after_sha256:
                        raise InputError(f"{d.path / name} changed after an interrupted hlo-doctor run",
                                         "check the file by hand; the journal is left in place")
                    with open_dir(self.root, FIXES_PARTS) as folder:
                        if sha256(folder.read(e.saved)) != e.before_sha256:
                            raise InputError(f"the saved copy of {e.rel} does not match",
                                             "check the file by hand; the journal is left in place")
                        os.replace(e.saved, name, src_dir_fd=folder.fd, dst_dir_fd=d.fd)
                    d.sync()
                d.unlink(e.temp)
        with open_dir(self.root, FIXES_PARTS) as folder:
            if self.manifest_next is not None:
                folder.unlink(self.manifest_next)
            remove_backups(self.root, backups_rel, self.new_backups)
            self._clean(folder)

    def _clean(self, folder: Dir) -> None:
        for e in self.entries:
            folder.unlink(e.saved)
        folder.unlink(journal_name(self.fix_id))
        folder.sync()
        remove_empty(self.root, [self.root / ".hlo-doctor", self.root / ".hlo-doctor" / "fixes"])


class _parent:
    """``with _parent(root, rel) as (folder, name)``: the open folder of a target file."""

    def __init__(self, root: Path, rel: str) -> None:
        self.dir, self.name = open_parent(root, rel)

    def __enter__(self) -> tuple[Dir, str]:
        return self.dir, self.name

    def __exit__(self, *exc: object) -> None:
        self.dir.close()


def remove_backups(root: Path, backups_rel: str, rels: Sequence[str]) -> None:
    """Remove the backup of each of ``rels`` and the folders left empty (never anything else)."""
    for rel in rels:
        parts = f"{backups_rel}/{rel}".split("/")
        try:
            with open_dir(root, parts[:-1]) as d:
                d.unlink(parts[-1])
        except (FileNotFoundError, NotADirectoryError):
            continue
        folders = [root.joinpath(*parts[:i]) for i in range(len(backups_rel.split("/")), len(parts))]
        remove_empty(root, folders)
