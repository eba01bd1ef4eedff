"""CLI: profile,stats (not available in this build yet)."""

from __future__ import annotations

import click

from hlo_doctor.cli.common import not_available


@click.command("profile", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def profile_cmd() -> None:
    """(Not available in this build yet.)"""
    not_available("profile", "this command has not been built yet")


@click.command("stats", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def stats_cmd() -> None:
    """(Not available in this build yet.)"""
    not_available("stats", "this command has not been built yet")

COMMANDS = [profile_cmd, stats_cmd]
