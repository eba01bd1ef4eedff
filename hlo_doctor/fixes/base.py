"""What every bundled fix shares: the ``Fix`` protocol, its ``Plan``, and the outcomes of a run.

A fix analyses the files of a detected :class:`~hlo_doctor.fixes.targets.Target` into a
:class:`Plan` (each structural element found ``original``, ``fixed`` or ``missing``, plus the new
texts that applying the pending elements would write) and explains a half-fixed tree in its own
words. Applying or reverting returns a :class:`FixOutcome`: ``FixApplied`` (files written, or that
would be on a dry run), ``FixSkipped`` (nothing to do) or ``FixRefused`` (the code does not match, or
the tree is half-fixed and completing it was not requested). Values, never exceptions; all frozen and
slotted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Union

if TYPE_CHECKING:
    from hlo_doctor.fixes.targets import Target

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
class Plan:
    """The analysis of a tree plus the new sources that applying the pending elements would write.

    ``relevant``: the elements of the variant asked for; ``preconditions``: elements every known
    release already satisfies (checked and enforced, but being "fixed" does not make a tree
    half-fixed). ``unfinishable`` and ``not_affected`` are reasons (empty when they do not hold).
    """

    elements: tuple[ElementStatus, ...]
    missing: tuple[str, ...]
    notes: tuple[str, ...]
    unsafe: tuple[str, ...]
    not_affected: str
    unfinishable: str
    new_sources: tuple[tuple[str, str], ...]
    relevant: tuple[str, ...]
    preconditions: frozenset[str] = frozenset()
    # Set when the tree carries exactly an earlier version of the fix: applying upgrades it (no
    # --complete needed); the reason is reported as a note.
    upgrade: str = ""

    def state(self, element: str) -> str | None:
        """The state of ``element`` in the tree, or None when it was not looked at."""
        return next((e.state for e in self.elements if e.element == element), None)

    @property
    def pending(self) -> tuple[str, ...]:
        """Relevant elements still in their original state."""
        states = {e.element: e.state for e in self.elements}
        return tuple(e for e in self.relevant if states.get(e) == "original")

    @property
    def done(self) -> tuple[str, ...]:
        """Relevant elements already fixed."""
        states = {e.element: e.state for e in self.elements}
        return tuple(e for e in self.relevant if states.get(e) == "fixed" and e not in self.preconditions)


class Fix(Protocol):
    """A bundled fix: an id, a title, its variants, a planner and its own half-fixed diagnosis."""

    fix_id: str
    title: str
    variants: tuple[str, ...]

    def plan(self, target: Target, sources: dict[str, str], variant: str, *, patch: bool = True) -> Plan:
        """Analyse ``sources`` (role -> text) and compute the patched texts for ``variant``.

        ``patch=False``: the analysis only (``new_sources`` empty), for asking whether the fix applies.
        """
        ...

    def explain_half_fixed(self, plan: Plan, variant: str) -> str:
        """What a tree with some elements fixed and others not does at run time, and what to do."""
        ...


class OutcomeFields(TypedDict, total=False):
    """The fields of :class:`FixOutcome`, to build several outcomes of one run from one value."""

    fix_id: str
    target_kind: str
    release: str
    elements: tuple[ElementStatus, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FixOutcome:
    """What every outcome of apply or revert names: the fix, the tree and the elements found."""

    fix_id: str = ""
    target_kind: str = ""
    release: str = ""
    elements: tuple[ElementStatus, ...] = ()
    # What this run recovered first: an interrupted earlier run finished or rolled back ("" if none).
    recovered: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        raise NotImplementedError

    def _with_recovered(self, doc: dict[str, Any]) -> dict[str, Any]:
        if self.recovered:
            doc["recovered"] = self.recovered
        return doc


@dataclass(frozen=True, slots=True, kw_only=True)
class FixApplied(FixOutcome):
    """The fix was applied (or, with ``dry_run``, would be): the files and the unified diff."""

    files: tuple[Path, ...]
    diff: str
    manifest_path: Path | None
    variant: str = "full"
    dry_run: bool = False
    reverted: bool = False
    completed_partial: bool = False
    notes: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()

    @property
    def parts_applied(self) -> tuple[int, ...]:
        """The part numbers that this run changed (sorted, unique)."""
        return tuple(sorted({e.part for e in self.elements if e.element in self.applied}))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``status``: applied / dry-run / reverted)."""
        status = "reverted" if self.reverted else ("dry-run" if self.dry_run else "applied")
        return self._with_recovered({
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
        })


@dataclass(frozen=True, slots=True, kw_only=True)
class FixSkipped(FixOutcome):
    """Nothing to do: ``kind`` is ``already-applied``, ``not-affected`` or ``nothing-to-revert``."""

    reason: str
    kind: str = "already-applied"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return self._with_recovered({
            "status": self.kind,
            "fix": self.fix_id,
            "reason": self.reason,
            "target_kind": self.target_kind,
            "release": self.release,
            "elements": [e.to_dict() for e in self.elements],
        })


@dataclass(frozen=True, slots=True, kw_only=True)
class FixRefused(FixOutcome):
    """The fix cannot be applied as asked; nothing was changed.

    ``kind``: ``anchors-missing`` (the code does not match: ``missing_anchors`` names what was not
    found), ``half-fixed`` (some parts are applied, others not; ``--complete`` finishes it),
    ``modified`` (revert: the files changed since the fix was applied), ``unsafe`` (the full variant's
    precondition does not hold).
    """

    reason: str
    missing_anchors: tuple[str, ...] = field(default=())
    kind: str = "anchors-missing"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return self._with_recovered({
            "status": "refused",
            "kind": self.kind,
            "fix": self.fix_id,
            "reason": self.reason,
            "missing_anchors": list(self.missing_anchors),
            "target_kind": self.target_kind,
            "release": self.release,
            "elements": [e.to_dict() for e in self.elements],
        })


FixResult = Union[FixApplied, FixSkipped, FixRefused]  # noqa: UP007 - a runtime alias, Python 3.10
"""What :func:`hlo_doctor.fixes.apply_fix` and :func:`hlo_doctor.fixes.revert_fix` return."""
