"""CLI: verify (not available in this build yet)."""

from __future__ import annotations

import click

from hlo_doctor.cli.common import not_available


@click.command("verify", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def verify_cmd() -> None:
    """(Not available in this build yet.)"""
    not_available("verify", "this command has not been built yet")

COMMANDS = [verify_cmd]
