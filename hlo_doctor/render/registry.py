"""Every renderer in one table, chosen by (subject, format): the commands ask here, never with if-chains.

A subject is what a command reports (``diagnosis``, ``gate``, ``verify``, ``verify-target``,
``verify-program``, ``doctor``); a format is what ``--format`` names (``table`` is the people's view on stderr, the
others are text for machines or files). Each entry takes the result and one :class:`RenderOptions`,
of which it reads only what its format needs, and returns text or, for ``table``, a rich renderable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    # Type-only: the renderers (and what they pull in: rich, numpy, the verify results) are imported
    # when a result is rendered, so that a command's --help and its option choices start fast.
    from rich.console import RenderableType

    from hlo_doctor.gate.result import GateResult
    from hlo_doctor.lint import Diagnosis, RuleBook
    from hlo_doctor.render.doctor import DoctorOutcome
    from hlo_doctor.verify.engine.results import VerifyReport
    from hlo_doctor.verify.program.results import ProgramReport
    from hlo_doctor.verify.tpu_inference.results import TargetReport

__all__ = ["DIAGNOSIS", "DOCTOR", "GATE", "SUBJECTS", "VERIFY", "VERIFY_PROGRAM", "VERIFY_TARGET", "Formats",
           "RenderOptions", "formats"]

Result = TypeVar("Result", contravariant=True)


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """What a renderer may need besides the result; each format reads only the fields it uses."""

    source_root: Path | None = None
    """Paths in SARIF, GitHub annotations, JUnit and one-line findings are relative to it."""
    rulebook: RuleBook | None = None
    """SARIF: the rules' descriptions."""
    exit_code: int = 0
    """SARIF: the exit code the command returns."""
    command_line: str = ""
    """SARIF: the command line that made the report."""
    details: bool = True
    """Diagnosis table: each finding's message, evidence and fix below the table."""
    rows: int = 20
    """Gate table: the ops shown."""
    fit: bool = False
    """Gate table: fit a terminal's width."""


@dataclass(frozen=True, slots=True)
class Formats(Generic[Result]):
    """One subject's renderers, by format name, in the order ``--format`` lists them."""

    subject: str
    renderers: Mapping[str, Callable[[Result, RenderOptions], RenderableType]]

    @property
    def names(self) -> tuple[str, ...]:
        """The format names, in ``--format``'s order."""
        return tuple(self.renderers)

    def render(self, fmt: str, result: Result, options: RenderOptions | None = None) -> RenderableType:
        """``result`` in ``fmt``; a ``ValueError`` for a format this subject does not have."""
        try:
            renderer = self.renderers[fmt]
        except KeyError:
            raise ValueError(f"unknown format {fmt!r} for a {self.subject}; known: {', '.join(self.names)}") from None
        return renderer(result, options or RenderOptions())

    def text(self, fmt: str, result: Result, options: RenderOptions | None = None) -> str:
        """``result`` in a text format (machine output, or a file); a ``TypeError`` for a terminal view."""
        out = self.render(fmt, result, options)
        if not isinstance(out, str):
            raise TypeError(f"{self.subject} format {fmt!r} is a terminal view, not text")
        return out


def _diagnosis() -> ModuleType:
    from hlo_doctor.render import diagnosis

    return diagnosis


def _gate() -> ModuleType:
    from hlo_doctor.render import gate

    return gate


def _gate_html(result: GateResult) -> str:
    from hlo_doctor.render.html.subjects import gate_to_html

    return gate_to_html(result)


def _verify() -> ModuleType:
    from hlo_doctor.render import verify

    return verify


def _verify_target() -> ModuleType:
    from hlo_doctor.render import verify_target

    return verify_target


def _verify_program() -> ModuleType:
    from hlo_doctor.render import verify_program

    return verify_program


def _doctor() -> ModuleType:
    from hlo_doctor.render import doctor

    return doctor


# Each renderer's module is imported on its first use (the lambdas), never when a command is loaded.
DIAGNOSIS: Formats[Diagnosis] = Formats("diagnosis", {
    "table": lambda d, o: _diagnosis().to_terminal(d, details=o.details),
    "concise": lambda d, o: _diagnosis().to_concise(d, o.source_root),
    "github": lambda d, o: _diagnosis().to_github(d, o.source_root),
    "json": lambda d, o: _diagnosis().to_json(d),
    "md": lambda d, o: _diagnosis().to_markdown(d),
    "sarif": lambda d, o: _diagnosis().to_sarif(d, o.rulebook, source_root=o.source_root, exit_code=o.exit_code,
                                                command_line=o.command_line),
})
GATE: Formats[GateResult] = Formats("gate", {
    "table": lambda r, o: _gate().to_text(r, max_rows=o.rows, fit=o.fit),
    "github": lambda r, o: _gate().to_github(r, source_root=o.source_root),
    "json": lambda r, o: _gate().to_json(r),
    "md": lambda r, o: _gate().to_markdown(r),
    "junit": lambda r, o: _gate().to_junit(r, source_root=o.source_root),
    "html": lambda r, o: _gate_html(r),
})
VERIFY: Formats[VerifyReport] = Formats("verify", {
    "table": lambda r, o: _verify().to_terminal(r),
    "json": lambda r, o: _verify().to_json(r),
    "md": lambda r, o: _verify().to_markdown(r),
})
VERIFY_TARGET: Formats[TargetReport] = Formats("verify-target", {
    "table": lambda r, o: _verify_target().to_terminal(r),
    "json": lambda r, o: _verify_target().to_json(r),
    "md": lambda r, o: _verify_target().to_markdown(r),
})
VERIFY_PROGRAM: Formats[ProgramReport] = Formats("verify-program", {
    "table": lambda r, o: _verify_program().to_terminal(r),
    "json": lambda r, o: _verify_program().to_json(r),
    "md": lambda r, o: _verify_program().to_markdown(r),
    "junit": lambda r, o: _verify_program().to_junit(r),
})
DOCTOR: Formats[DoctorOutcome] = Formats("doctor", {
    "table": lambda r, o: _doctor().to_terminal(r),
    "json": lambda r, o: _doctor().to_json(r),
    "md": lambda r, o: _doctor().to_markdown(r),
})

SUBJECTS: Mapping[str, Formats[Any]] = {f.subject: f for f in (DIAGNOSIS, GATE, VERIFY, VERIFY_TARGET, VERIFY_PROGRAM, DOCTOR)}
"""The one registry: subject -> its formats -> the renderer."""


def formats(subject: str) -> tuple[str, ...]:
    """The format names of ``subject``; a ``ValueError`` for a subject nothing renders."""
    try:
        return SUBJECTS[subject].names
    except KeyError:
        raise ValueError(f"unknown subject {subject!r}; known: {', '.join(SUBJECTS)}") from None
