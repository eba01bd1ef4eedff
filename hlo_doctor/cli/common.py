"""What every command shares: the consoles, error handling, machine-output writing, the CLI vocabulary
(``--format`` names, ``-o/--output``, examples in ``--help``)."""

from __future__ import annotations

import functools
import io
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape
from rich.measure import Measurement

from hlo_doctor.core.atomic import write_atomically
from hlo_doctor.core.errors import ExitCode, HloDoctorError
from hlo_doctor.core.escape.terminal import ShownConsole
from hlo_doctor.core.escape.text import visible

F = TypeVar("F", bound=Callable[..., Any])

# People read stderr; machines read stdout (or --output FILE). rich honours NO_COLOR and FORCE_COLOR. Every
# console shows the control and bidi characters a capture's names may hold instead of sending them.
console = ShownConsole(stderr=True, highlight=False)

STDOUT = Path("-")
"""``--output -``: standard output."""


def people_see_a_terminal() -> bool:
    """Whether stderr is a terminal: tables fit its width there; in a pipe or a CI log they never fold."""
    return sys.stderr.isatty()


def in_github_actions() -> bool:
    """Running as a GitHub Actions step (annotations are the default output there)."""
    return os.environ.get("GITHUB_ACTIONS", "").lower() == "true"


def print_wide(renderable: Any) -> None:
    """Print on stderr; off a terminal at the renderable's full width, so that no cell is cut or folded."""
    if people_see_a_terminal():
        console.print(renderable)
        return
    wide = console.options.update_width(1 << 16)
    width = Measurement.get(console, wide, renderable).maximum
    ShownConsole(file=console.file, width=max(width, 1), highlight=False).print(renderable)


def plain_text(renderable: Any) -> str:
    """A renderable as text without colour, at its full width (for ``--format table -o FILE``)."""
    buf = io.StringIO()
    probe = ShownConsole(file=buf, width=1 << 16, no_color=True, highlight=False)
    width = Measurement.get(probe, probe.options, renderable).maximum
    ShownConsole(file=buf, width=max(width, 1), no_color=True, highlight=False).print(renderable)
    return buf.getvalue()


class FormatChoice(click.Choice):  # type: ignore[type-arg]
    """``--format`` values, plus old names accepted and mapped (``rich``/``text`` -> ``table``)."""

    def __init__(self, choices: list[str], aliases: dict[str, str] | None = None) -> None:
        super().__init__(choices)
        self.aliases = aliases or {}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return super().convert(self.aliases.get(str(value), value), param, ctx)


def output_option(help_text: str = "Write the --format output to FILE ('-': stdout).") -> Callable[[F], F]:
    """``-o/--output FILE``, the same on every command; ``-`` is standard output."""
    return click.option("--output", "-o", "output", type=click.Path(path_type=Path, allow_dash=True), default=None,
                        help=help_text)


def examples(*lines: str) -> str:
    """An ``Examples:`` epilog for ``--help`` (kept verbatim)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def fail(error: HloDoctorError) -> None:
    """Print the one-line error and exit with its code."""
    # Escaped: messages quote TOML tables ([gate]) and shapes, which rich would read as markup.
    # One line whatever the message quotes (a name from a capture may hold a newline or an escape sequence).
    console.print(f"[bold red]error:[/] {escape(visible(error.one_line()))}", soft_wrap=True)
    sys.exit(int(error.exit_code))


def handle_errors(func: F) -> F:
    """Turn HloDoctorError into one line + exit 2, and any other exception into exit 3."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except HloDoctorError as exc:
            fail(exc)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except MemoryError:
            # An input that asks for more memory than there is (a huge string, a bomb): the input's
            # fault, one line, never a traceback.
            console.print("[bold red]error:[/] out of memory reading the input - it is larger than this "
                          "machine can hold, or damaged; check the file", soft_wrap=True)
            sys.exit(int(ExitCode.USAGE))
        except KeyboardInterrupt as exc:
            # SIGTERM arrives as a KeyboardInterrupt subclass where a command asked for it (profile):
            # the same clean-up, the conventional 128 + signal number.
            terminated = type(exc).__name__ == "Terminated"
            console.print("[red]terminated[/]" if terminated else "[red]interrupted[/]")
            sys.exit(143 if terminated else 130)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {escape(visible(str(exc)))}")
            console.print("[dim]" + escape("".join(traceback.format_exception(exc)[-6:])) + "[/]")
            console.print("please report this with the command line and the input")
            sys.exit(int(ExitCode.INTERNAL))

    return wrapper  # type: ignore[return-value]


def write_output(text: str, output: Path | None) -> None:
    """Machine output to ``output`` (atomically) or to stdout (``output`` None or ``-``)."""
    if output is None or output == STDOUT:
        click.echo(text, nl=not text.endswith("\n"))
        return
    write_file_atomically(output, text)
    console.print(f"wrote {escape(str(output))}", soft_wrap=True)


def write_file_atomically(path: Path, data: str | bytes, *, folder_no_link: bool = False) -> None:
    """Write ``data`` to ``path`` whole or not at all, with the mode the umask gives a new file
    (:func:`hlo_doctor.core.atomic.write_atomically`).

    Raises:
        InputError: the folder cannot be created or written, or ``path`` is a folder; nothing is left
            behind.
    """
    write_atomically(path, data, folder_no_link=folder_no_link)


def not_available(command: str, reason: str) -> None:
    """For a command this build does not provide yet: say so, exit 2."""
    fail(HloDoctorError(f"'{command}' is not available in this build", reason))


def announce_capture(path: Path, label: str = "capture") -> Callable[[], None]:
    """Find which capture ``path`` names and return what prints it: the command's first line on stderr
    (``capture: runs/doctor/profile/plugins/profile/<run>/host.xplane.pb (the baseline profile of
    ...)``), called once the capture was read, so that an unreadable one is still the one line of its
    error. A folder of several captures without a baseline raises :class:`InputError` naming them at
    once; a path that does not exist prints nothing (the reader says so).
    """
    from hlo_doctor.trace.locate import locate_capture

    if not path.exists():
        return lambda: None
    where = locate_capture(path)
    return lambda: console.print(where.line(label), soft_wrap=True, markup=False, highlight=False)

