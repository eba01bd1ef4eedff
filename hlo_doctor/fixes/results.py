"""What applying or reverting a fix returns: values, never exceptions.

``FixApplied`` (files written, or that would be written on a dry run), ``FixSkipped`` (nothing to do:
already applied, not affected, nothing to revert), ``FixRefused`` (the code does not match, or the tree
is half-fixed and completing it was not requested). All frozen and slotted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

PartState = Literal["original", "fixed", "missing"]


@dataclass(frozen=True, slots=True)
class ElementStatus:
    """One structural element of a fix, as found in a tree.

    ``element`` is a stable id (``runner.eager_widening``), ``part`` the numbered part it belongs to
    (1 runner, 2 sampler, 3 precompile menu), ``state`` original / fixed / missing (anchor not found),
    ``where`` a ``file:line`` pointer into the tree as read, ``detail`` what was seen.
    """

    element: str
    part: int
    title: str
    state: PartState
    where: str = ""
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "element": self.element,
            "part": self.part,
            "title": self.title,
            "state": self.state,
            "where": self.where,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class FixApplied:
    """The fix was applied (or, with ``dry_run``, would be): the files and the unified diff."""

    files: tuple[Path, ...]
    diff: str
    manifest_path: Path | None
    target_kind: str
    release: str
    fix_id: str = ""
    variant: str = "full"
    dry_run: bool = False
    reverted: bool = False
    completed_partial: bool = False
    elements: tuple[ElementStatus, ...] = ()
    notes: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()

    @property
    def parts_applied(self) -> tuple[int, ...]:
        """The part numbers that this run changed (sorted, unique)."""
        return tuple(sorted({e.part for e in self.elements if e.element in self.applied}))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``status``: applied / dry-run / reverted)."""
        status = "reverted" if self.reverted else ("dry-run" if self.dry_run else "applied")
        return {
            "status": status,
            "fix": self.fix_id,
            "variant": self.variant,
            "target_kind": self.target_kind,
            "release": self.release,
            "files": [str(p) for p in self.files],
            "manifest": str(self.manifest_path) if self.manifest_path else None,
            "completed_partial": self.completed_partial,
            "parts_applied": list(self.parts_applied),
            "elements_applied": list(self.applied),
            "elements": [e.to_dict() for e in self.elements],
            "notes": list(self.notes),
            "diff": self.diff,
        }


@dataclass(frozen=True, slots=True)
class FixSkipped:
    """Nothing to do: ``kind`` is ``already-applied``, ``not-affected`` or ``nothing-to-revert``."""

    reason: str
    kind: str = "already-applied"
    target_kind: str = ""
    release: str = ""
    fix_id: str = ""
    elements: tuple[ElementStatus, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "status": self.kind,
            "fix": self.fix_id,
            "reason": self.reason,
            "target_kind": self.target_kind,
            "release": self.release,
            "elements": [e.to_dict() for e in self.elements],
        }


@dataclass(frozen=True, slots=True)
class FixRefused:
    """The fix cannot be applied as asked; nothing was changed.

    ``kind``: ``anchors-missing`` (the code does not match: ``missing_anchors`` names what was not
    found), ``half-fixed`` (some parts are applied, others not; ``--complete`` finishes it),
    ``modified`` (revert: the files changed since the fix was applied), ``unsafe`` (the full variant's
    precondition does not hold).
    """

    reason: str
    missing_anchors: tuple[str, ...] = ()
    kind: str = "anchors-missing"
    target_kind: str = ""
    release: str = ""
    fix_id: str = ""
    elements: tuple[ElementStatus, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "status": "refused",
            "kind": self.kind,
            "fix": self.fix_id,
            "reason": self.reason,
            "missing_anchors": list(self.missing_anchors),
            "target_kind": self.target_kind,
            "release": self.release,
            "elements": [e.to_dict() for e in self.elements],
        }


FixResult = Union[FixApplied, FixSkipped, FixRefused]  # noqa: UP007 - a runtime alias, Python 3.10
"""What :func:`hlo_doctor.fixes.apply_fix` and :func:`hlo_doctor.fixes.revert_fix` return."""
