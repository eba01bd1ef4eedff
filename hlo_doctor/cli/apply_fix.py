"""CLI: apply-fix (not available in this build yet)."""

from __future__ import annotations

import click

from hlo_doctor.cli.common import not_available


@click.command("apply-fix", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def apply_fix_cmd() -> None:
    """(Not available in this build yet.)"""
    not_available("apply-fix", "this command has not been built yet")

COMMANDS = [apply_fix_cmd]
