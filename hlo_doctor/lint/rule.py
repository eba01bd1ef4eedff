"""The rule API: the :class:`Rule` base class every rule file subclasses, and :class:`Example`.

A rule is one file ``hdNNN_<slug>.py`` holding one class that subclasses :class:`Rule`; what it
looks at is a :class:`hlo_doctor.lint.Context`. Rule files import only :mod:`hlo_doctor.lint`
and :mod:`hlo_doctor.hlo`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from hlo_doctor.core.model import Finding, Severity

if TYPE_CHECKING:
    from hlo_doctor.lint.context import Context

REQUIREMENTS = ("hlo", "opstats", "source", "memory")
"""What a rule may require from the input: HLO modules, op-stats timings, the source tree, the
programs' buffer assignments."""

DOC_SECTIONS = ("What it flags", "Why it costs", "Example", "Fix")


@dataclass(frozen=True, slots=True)
class Example:
    """One input for a rule with the findings it must produce; every example becomes a test.

    ``expect`` lists ``"CODE op"`` strings (``"HD002 copy"``), or ``"CODE op@module"`` where the op
    name alone is ambiguous. ``opstats`` rows use the op-stats column names
    (:data:`hlo_doctor.opstats.COLUMNS`); missing columns are filled in. ``source`` maps relative
    paths to file contents, written into a temporary tree for source rules.
    """

    hlo: tuple[str, ...] = ()
    opstats: tuple[Mapping[str, Any], ...] = ()
    step_time_us: float | None = None
    num_steps: int = 0
    compile_events: tuple[Mapping[str, Any], ...] = ()
    breakdown: Mapping[str, Any] | None = None
    """A step breakdown as its JSON export writes it (``hlo-doctor stats RUN --breakdown json``)."""
    source: Mapping[str, str] = field(default_factory=dict)
    memory: Mapping[str, Any] | None = None
    """The programs' memory as ``hlo-doctor memory --format json`` writes it (a capture's buffer
    assignments: peak, buffers at the peak, allocations)."""
    expect: tuple[str, ...] = ()
    note: str = ""
    """What the example shows, for the test id and for ``rules explain``."""


class Rule:
    """Base class of a rule. Subclasses set the class attributes and implement :meth:`check`."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    severity: ClassVar[Severity] = Severity.MEDIUM
    requires: ClassVar[tuple[str, ...]] = ("hlo",)
    fix: ClassVar[str] = ""
    """Id of the bundled fix that removes what the rule flags, when one exists."""
    VALID: ClassVar[tuple[Example, ...]] = ()
    """Inputs that must yield no finding of this rule."""
    INVALID: ClassVar[tuple[Example, ...]] = ()
    """Inputs that must yield exactly the findings their ``expect`` lists."""

    def check(self, ctx: Context) -> Iterator[Finding]:
        """Yield the findings of this rule for ``ctx``."""
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        """The first paragraph of the docstring, on one line."""
        doc = inspect.getdoc(cls) or ""
        return " ".join(doc.split("\n\n", 1)[0].split())

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring split into its sections (``What it flags``, ``Why it costs``...)."""
        doc = inspect.getdoc(cls) or ""
        sections: dict[str, str] = {}
        current = ""
        lines: list[str] = []
        for line in doc.splitlines():
            header = line.rstrip().rstrip(":")
            if header in DOC_SECTIONS and line.rstrip().endswith(":"):
                if current:
                    sections[current] = "\n".join(lines).strip()
                current, lines = header, []
            elif current:
                lines.append(line)
        if current:
            sections[current] = "\n".join(lines).strip()
        return sections
