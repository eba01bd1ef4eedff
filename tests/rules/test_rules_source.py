"""HD006 on the reference engine's own source: original, half-fixed both ways, fully fixed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_wheels import PINNED_RELEASES, unpack

from hlo_doctor.cli import main
from hlo_doctor.core.model import Finding
from hlo_doctor.lint import Context, load_rulebook, run_rule

ENGINE = Path(__file__).resolve().parents[2] / "hlo_doctor" / "engine"
SEED = Path(__file__).resolve().parents[2] / "sample_traces" / "seed_v5e_b512"
HD006 = load_rulebook().get("HD006")
WIDEN = "            logits = logits.astype(jnp.float32)\n"


def _hd006(tree: Path) -> list[Finding]:
    assert HD006 is not None
    return run_rule(HD006, Context(source_root=tree))


def _copy_engine(tmp_path: Path) -> Path:
    tree = tmp_path / "engine"
    shutil.copytree(ENGINE, tree, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


@pytest.fixture(scope="module")
def fixed_engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = _copy_engine(tmp_path_factory.mktemp("fixed"))
    r = CliRunner().invoke(main, ["apply-fix", "bf16-greedy-sampler", "--target", str(tree)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return tree


def test_original_engine_is_consistent() -> None:
    runner = (ENGINE / "runner.py").read_text()
    assert WIDEN in runner, "the engine's runner no longer widens as this test assumes"
    assert _hd006(ENGINE) == []


def test_half_fixed_engine_runner_only(tmp_path: Path) -> None:
    tree = _copy_engine(tmp_path)
    runner = tree / "runner.py"
    runner.write_text(runner.read_text().replace(WIDEN, "", 1))
    findings = _hd006(tree)
    assert len(findings) == 1
    f = findings[0]
    assert f.source.startswith("compilation_manager.py:") and f.fix == "bf16-greedy-sampler"
    assert "float32" in f.message and "model-dtype" in f.message
    assert any(e.startswith("runner.py:") for e in f.evidence)


def test_fully_fixed_engine(fixed_engine: Path) -> None:
    assert _hd006(fixed_engine) == []


def test_half_fixed_engine_menu_only(fixed_engine: Path, tmp_path: Path) -> None:
    tree = tmp_path / "menu_only"
    shutil.copytree(fixed_engine, tree)
    shutil.copy(ENGINE / "runner.py", tree / "runner.py")
    findings = _hd006(tree)
    assert len(findings) == 1 and "passes float32 logits" in findings[0].message


def test_diagnose_cli_with_source(tmp_path: Path) -> None:
    tree = _copy_engine(tmp_path)
    runner = tree / "runner.py"
    runner.write_text(runner.read_text().replace(WIDEN, "", 1))
    r = CliRunner().invoke(main, ["diagnose", str(SEED), "--source", str(tree), "--format", "json",
                                  "--select", "HD006", "--fail-on", "high"], catch_exceptions=False)
    assert r.exit_code == 1
    assert '"code": "HD006"' in r.stdout
    r = CliRunner().invoke(main, ["diagnose", str(SEED), "--source", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "--source" in r.output


# -- the real tpu-inference releases (wheels from the package registry, cached) --------------------


RUNNER_WIDEN = """        if spec_decode_metadata is None:
            logits = logits.astype(jnp.float32)
"""


@pytest.mark.parametrize("version", PINNED_RELEASES)
def test_tpu_inference_original_and_half_fixed(version: str, tmp_path: Path) -> None:
    tree = unpack(version, tmp_path / version)
    assert _hd006(tree) == []
    runner = tree / "tpu_inference" / "runner" / "tpu_runner.py"
    text = runner.read_text()
    assert text.count(RUNNER_WIDEN) == 1, "the runner's non-spec widening moved"
    # The 0.24.0 hand fix: drop the runner-side widening, leave the precompile menu at float32.
    runner.write_text(text.replace(RUNNER_WIDEN, "        if spec_decode_metadata is None:\n"))
    findings = _hd006(tree)
    assert len(findings) == 1
    assert findings[0].source.startswith("tpu_inference/runner/compilation_manager.py:")
    # The 0.23.0 hand fix: widen only when sampling; greedy calls then pass bf16 to an f32 menu.
    runner.write_text(text.replace(RUNNER_WIDEN, """        if spec_decode_metadata is None:
            if tpu_sampling_metadata.do_sampling:
                logits = logits.astype(jnp.float32)
"""))
    findings = _hd006(tree)
    assert len(findings) == 1 and "float32 or model-dtype" in findings[0].message


def test_tpu_inference_fully_fixed(tmp_path: Path) -> None:
    tree = unpack("0.24.0", tmp_path / "fixed")
    r = CliRunner().invoke(main, ["apply-fix", "bf16-greedy-sampler", "--target", str(tree)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert _hd006(tree) == []
