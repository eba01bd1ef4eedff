"""The ``hlo-doctor`` command line: a click group; each command lives in its own module here.

Only this package prints. Exit codes: see :class:`hlo_doctor.core.errors.ExitCode`.
"""

from __future__ import annotations

import importlib
import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import click

from hlo_doctor import __version__
from hlo_doctor.cli.common import examples, fail
from hlo_doctor.cli.config import default_map
from hlo_doctor.core.errors import HloDoctorError


def _events_reader() -> str:
    """Which reader decodes an xplane's events, and which other compiled passes the install has, said
    without importing them (``--version`` stays light)."""
    package = Path(__file__).resolve().parents[1]

    def built(module: str) -> bool:
        return any((package / f"{module}{suffix}").is_file() for suffix in EXTENSION_SUFFIXES)
    if os.environ.get("HLO_DOCTOR_NUMPY_READER"):
        return "xplane events: numpy reader (HLO_DOCTOR_NUMPY_READER is set)"
    if not built("trace/_xwire"):
        return "xplane events: numpy reader (the compiled one was not built: no C compiler at install)"
    also = [what for what, module in (("op sums", "opstats/_xsums"), ("host threads' walk", "trace/_xsegments"))
            if built(module)]
    return "xplane events: compiled reader" + (f" (compiled too: {', '.join(also)})" if also else "")


COMMAND_MODULES: dict[str, str] = {
    "profile": "profile", "stats": "profile", "diagnose": "diagnose", "apply-fix": "apply_fix",
    "verify": "verify", "gate": "gate", "rules": "rules", "engine": "engine", "doctor": "doctor",
    "report": "report", "memory": "memory", "mcp": "mcp",
}
"""Each command's module under :mod:`hlo_doctor.cli` (its ``COMMANDS``), imported when that command
runs, not the others: ``stats`` of a capture does not load what ``apply-fix`` or ``verify`` need."""


class Commands(click.Group):
    """A group whose commands are imported from :data:`COMMAND_MODULES` when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            module = importlib.import_module(f"hlo_doctor.cli.{COMMAND_MODULES[cmd_name]}")
            for command in module.COMMANDS:
                self.add_command(command)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in COMMAND_MODULES and not ctx.resilient_parsing:
            self.load_all()  # an unknown name: every command loaded, so that click's error names the closest
        return super().resolve_command(ctx, args)

    def load_all(self) -> dict[str, click.Command]:
        """Every command, by name (what ``commands`` holds once each module is imported)."""
        for name in COMMAND_MODULES:
            self.get_command(click.Context(self), name)
        return dict(self.commands)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=examples(
                 "hlo-doctor profile --out runs/decode && hlo-doctor diagnose runs/decode",
                 "hlo-doctor gate baseline/ runs/decode --format junit -o gate.xml",
                 'eval "$(_HLO_DOCTOR_COMPLETE=bash_source hlo-doctor)"   # shell completion (README)',
             ))
@click.version_option(__version__, prog_name="hlo-doctor", message=f"%(prog)s, version %(version)s\n{_events_reader()}")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Find, fix and gate wasted work in the compiled (HLO) programs of JAX serving stacks.

    Defaults for commands' options can live in [tool.hlo-doctor] of pyproject.toml (docs/cli.md).

    \b
    Exit codes: 0 clean / passed, 1 findings or regression remain (gates),
                2 usage or input error, 3 internal error.
    """
    if ctx.resilient_parsing:  # shell completion: never fail on the project's settings
        return
    try:
        ctx.default_map = default_map(Path.cwd())
    except HloDoctorError as exc:
        fail(exc)

