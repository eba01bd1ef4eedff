"""What every command shares: the consoles, error handling, machine-output writing."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from hlo_doctor.core.errors import ExitCode, HloDoctorError

F = TypeVar("F", bound=Callable[..., Any])

# People read stderr; machines read stdout (or --output FILE).
console = Console(stderr=True, highlight=False)


def fail(error: HloDoctorError) -> None:
    """Print the one-line error and exit with its code."""
    # Escaped: messages quote TOML tables ([gate]) and shapes, which rich would read as markup.
    console.print(f"[bold red]error:[/] {escape(error.one_line())}", soft_wrap=True)
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
        except KeyboardInterrupt:
            console.print("[red]interrupted[/]")
            sys.exit(130)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc}")
            console.print("[dim]" + "".join(traceback.format_exception(exc)[-6:]) + "[/]")
            console.print("please report this with the command line and the input")
            sys.exit(int(ExitCode.INTERNAL))

    return wrapper  # type: ignore[return-value]


def write_output(text: str, output: Path | None) -> None:
    """Machine output to ``output`` (atomically) or to stdout."""
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(output)
    console.print(f"wrote {output}")


def not_available(command: str, reason: str) -> None:
    """For a command this build does not provide yet: say so, exit 2."""
    fail(HloDoctorError(f"'{command}' is not available in this build", reason))
