"""What the rule tests on profiled programs share: a program profiled and diagnosed through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hlo_doctor.cli import main


def profile_and_diagnose(program: Path, target: str, out: Path) -> dict:  # type: ignore[type-arg]
    """``hlo-doctor profile PROGRAM:TARGET`` (3 steps after 1 warm-up) into ``out``, then its diagnosis as JSON."""
    runner = CliRunner()
    result = runner.invoke(main, ["profile", f"{program}:{target}", "--steps", "3", "--warmup", "1",
                                  "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["diagnose", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def line_of(program: Path, text: str) -> int:
    """The number of the first line of ``program`` holding ``text``."""
    return next(i for i, line in enumerate(program.read_text().splitlines(), 1) if text in line)
