"""``hlo-doctor verify``'s command module stays light (its kinds of target load when it runs) and the
defaults its --help shows are the verify core's."""

from __future__ import annotations

import ast
from pathlib import Path

from click.testing import CliRunner

import hlo_doctor.cli.verify as cli
from hlo_doctor.cli import main
from hlo_doctor.verify import DEFAULT_MAX_TOKENS
from hlo_doctor.verify import settings as core
from hlo_doctor.verify.program.settings import DEFAULT_STEPS
from hlo_doctor.verify.tpu_inference.settings import TargetSettings

LIGHT = {"__future__", "pathlib", "typing", "click", "hlo_doctor.cli.common", "hlo_doctor.core.errors"}


def test_the_command_module_imports_only_light_modules_at_its_top() -> None:
    tree = ast.parse(Path(cli.__file__).read_text(encoding="utf-8"))
    top: set[str] = set()
    for node in tree.body:  # module level only; `if TYPE_CHECKING:` blocks never run
        if isinstance(node, ast.Import):
            top.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.add(node.module)
    assert top <= LIGHT, sorted(top - LIGHT)


def test_the_defaults_in_help_are_the_cores() -> None:
    assert (cli.DEFAULT_ROUNDS, cli.DEFAULT_TTFT_BOUND, cli.DEFAULT_MIN_EFFECT, cli.DEFAULT_ALPHA) == (
        core.DEFAULT_ROUNDS, core.DEFAULT_TTFT_BOUND, core.DEFAULT_MIN_EFFECT, core.DEFAULT_ALPHA)
    assert cli.DEFAULT_MAX_TOKENS == DEFAULT_MAX_TOKENS
    assert (cli.PROGRAM_STEPS, cli.TARGET_STEPS) == (DEFAULT_STEPS, TargetSettings.__dataclass_fields__["steps"].default)
    text = CliRunner().invoke(main, ["verify", "--help"]).output
    assert f"[default: {core.DEFAULT_ROUNDS}]" in text and "TARGET (FILE.py:FUNC" in text


def test_program_options_are_refused_with_engine_trees() -> None:
    result = CliRunner().invoke(main, ["verify", "step.py:step", "--fix", "eager-widening", "--baseline", "."])
    assert result.exit_code == 2 and "--baseline is for engine trees" in result.output
    result = CliRunner().invoke(main, ["verify", "--fix", "bf16-greedy-sampler", "--format", "junit"])
    assert result.exit_code == 2 and "--format junit is for verify TARGET" in result.output
