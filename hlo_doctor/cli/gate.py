"""CLI: gate (not available in this build yet)."""

from __future__ import annotations

import click

from hlo_doctor.cli.common import not_available


@click.command("gate", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def gate_cmd() -> None:
    """(Not available in this build yet.)"""
    not_available("gate", "this command has not been built yet")

COMMANDS = [gate_cmd]
