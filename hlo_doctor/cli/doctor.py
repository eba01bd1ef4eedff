"""CLI: doctor (not available in this build yet)."""

from __future__ import annotations

import click

from hlo_doctor.cli.common import not_available


@click.command("doctor", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def doctor_cmd() -> None:
    """(Not available in this build yet.)"""
    not_available("doctor", "this command has not been built yet")

COMMANDS = [doctor_cmd]
