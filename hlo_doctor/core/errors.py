"""Exit codes and the one error type that crosses stage boundaries as an exception.

Stages return values for expected outcomes (a fix skipped, a rule that found nothing); an
``HloDoctorError`` is for input the user has to change. The CLI turns it into one line on stderr
and exit code 2, never a traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The documented exit codes of every command."""

    OK = 0
    """Clean: nothing found, or the gate/verification passed."""
    FINDINGS = 1
    """Findings or a regression remain (for commands that act as a gate)."""
    USAGE = 2
    """Usage or input error: one line says what and what to do."""
    INTERNAL = 3
    """A bug in hlo-doctor."""


class HloDoctorError(Exception):
    """Bad input or an impossible request: reported as one line plus a hint, exit code 2.

    ``what`` names the problem (and the file); ``hint`` says what to do about it.
    """

    def __init__(self, what: str, hint: str = "", *, exit_code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(what)
        self.what = what
        self.hint = hint
        self.exit_code = exit_code

    def one_line(self) -> str:
        """The message as printed: ``what`` and, when given, ``hint`` after a dash."""
        return f"{self.what} - {self.hint}" if self.hint else self.what


class InputError(HloDoctorError):
    """A file or directory given by the user is missing, unreadable or of the wrong kind."""


class NoOpsError(InputError):
    """A capture that holds no compiled-op events: nothing compiled ran in its window."""


class NotAvailableError(HloDoctorError):
    """A capability that this build or this machine cannot provide."""
