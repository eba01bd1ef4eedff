"""What a file fix is: its protocol, the hint a finding gives it, its outcomes and its examples.

A file fix (a codemod over one Python file) is asked to rewrite the code at one line (the line a
finding names) or, without a line, at every place in the file that holds its pattern. It answers
with a value: :class:`Rewritten` (the new text and one :class:`SiteEdit` per place changed) or
:class:`NotApplicable` with the reason (the line does not hold the pattern; the pattern is there but
changing it could change what the program computes; the fix is already there).

Each fix carries ``VALID`` and ``INVALID`` :class:`SourceExample` values, the way rules do:
``tests/fixes/test_catalog_examples.py`` runs every one through the real codemod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, Union

if TYPE_CHECKING:
    from hlo_doctor.core.model import Finding

__all__ = ["Hint", "NotApplicable", "NotApplicableKind", "Rewritten", "SiteEdit", "SiteOutcome", "SourceExample", "SourceFix"]


@dataclass(frozen=True, slots=True)
class Hint:
    """What a finding says about its code beyond the line (each fix reads what it needs).

    ``argument``: the jitted function's argument a copied parameter belongs to (``state``);
    ``narrow_dtype``/``wide_dtype``: the dtypes of a widening as HLO writes them (``bf16``, ``f32``);
    ``rank``: the rank of a matmul's result; ``lines``: the other lines of the finding's stack in the
    same file, innermost first (a call site, a caller).
    """

    argument: str = ""
    narrow_dtype: str = ""
    wide_dtype: str = ""
    rank: int | None = None
    lines: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SiteEdit:
    """One place a fix changed: its line (in the file as read), what was done, whether it is safe."""

    line: int
    what: str
    safe: bool
    note: str = ""


@dataclass(frozen=True, slots=True)
class Rewritten:
    """The new text of the file and the places changed; ``passed``: places seen and left, with why."""

    text: str
    edits: tuple[SiteEdit, ...]
    passed: tuple[str, ...] = ()

    @property
    def safe(self) -> bool:
        """Whether every edit is safe (output-identical by construction)."""
        return all(e.safe for e in self.edits)


NotApplicableKind = Literal["no-pattern", "refused", "already-applied"]


@dataclass(frozen=True, slots=True)
class NotApplicable:
    """Why nothing is rewritten.

    ``kind``: ``no-pattern`` (the line, or the file, does not hold what the fix changes: the file
    changed since the run, or the finding is not this fix's), ``refused`` (the pattern is there, but
    changing it could change the program's results: the reason names the line that forbids it),
    ``already-applied``.
    """

    reason: str
    kind: NotApplicableKind = "no-pattern"


SiteOutcome = Union[Rewritten, NotApplicable]  # noqa: UP007 - a runtime alias


@dataclass(frozen=True, slots=True)
class SourceExample:
    """A fix's example: ``code`` and, for an INVALID one, the ``fixed`` text expected.

    ``line``: the line a finding would name (1-based; None: the whole file); ``hint``: what the
    finding would say; VALID examples name the ``kind`` of refusal expected and a piece of its
    ``reason``; INVALID ones whether the edit is ``safe``.
    """

    code: str
    fixed: str = ""
    line: int | None = None
    hint: Hint = Hint()
    note: str = ""
    kind: NotApplicableKind = "refused"
    reason: str = ""
    safe: bool = True


class SourceFix(Protocol):
    """A codemod over one Python file (see the module docstring)."""

    fix_id: ClassVar[str]
    title: ClassVar[str]
    # Whether the fix may look for its pattern at the outer lines of a finding's stack too (the
    # jit of a loop is at the caller's level, not at the loop's own line).
    walks_stack: ClassVar[bool]
    VALID: ClassVar[tuple[SourceExample, ...]]
    INVALID: ClassVar[tuple[SourceExample, ...]]

    def hint(self, finding: Finding) -> Hint:
        """What ``finding`` says that this fix reads."""
        ...

    def rewrite(self, text: str, line: int | None, hint: Hint) -> SiteOutcome:
        """Rewrite ``text`` at ``line`` (every place, when None)."""
        ...
