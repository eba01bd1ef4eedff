"""diagnose on small-vocabulary captures of the reference engine: original and fixed trees."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.lint import diagnose, load_context, load_rulebook

ENGINE = Path(__file__).resolve().parents[2] / "hlo_doctor" / "engine"
BOOK = load_rulebook()

# A profile target that builds the engine small (vocab 2048, batch 8) and warms it at import, so
# the traced steps are steady-state decode steps.
TARGET = """
from hlo_doctor.engines import load_engine

_eng = load_engine({tree!r})
_target = _eng.profile_target(_eng.EngineConfig(batch=8, max_num_reqs=8, vocab_size=2048))
_target.warmup()


def step():
    return _target.step().next_tokens
"""


def _capture(tmp: Path, tree: Path | None) -> Path:
    src = tmp / "engine_target.py"
    src.write_text(textwrap.dedent(TARGET.format(tree=str(tree) if tree else None)))
    out = tmp / "run"
    r = CliRunner().invoke(main, ["profile", f"{src}:step", "--steps", "4", "--warmup", "2", "--out", str(out),
                                  "--format", "json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def original_engine_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _capture(tmp_path_factory.mktemp("engine"), None)


@pytest.fixture(scope="module")
def fixed_engine_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("engine_fixed")
    tree = tmp / "engine"
    shutil.copytree(ENGINE, tree, ignore=shutil.ignore_patterns("__pycache__"))
    r = CliRunner().invoke(main, ["apply-fix", "bf16-greedy-sampler", "--target", str(tree)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return _capture(tmp, tree), tree


@pytest.mark.slow
def test_original_engine(original_engine_run: Path) -> None:
    result = diagnose(load_context(original_engine_run, source_root=ENGINE), BOOK)
    got = {(f.code, f.module, f.op) for f in result.findings}
    assert got == {
        ("HD003", "jit_convert_element_type", "wrapped_convert"),
        ("HD002", "jit_sample", "copy"),
        ("HD004", "jit_sample", "iota_reduce_fusion"),
    }, [f.message for f in result.findings]
    assert "HD006" in result.rules_run  # the source was read and is consistent
    copy = next(f for f in result.findings if f.code == "HD002")
    assert copy.shape == "f32[8,2048]{1,0}" and copy.recoverable_us and copy.recoverable_us > 0
    assert result.recoverable_us is not None and result.recoverable_us > 0


@pytest.mark.slow
def test_fixed_engine_is_clean(fixed_engine_run: tuple[Path, Path]) -> None:
    run, tree = fixed_engine_run
    result = diagnose(load_context(run, source_root=tree), BOOK)
    assert result.findings == (), [f.message for f in result.findings]
