"""Loading engine trees side by side, the seed's failure mode on a hand-patched tree, and the CLI.

The failure mode: a runner that stops widening the logits before ``sample`` while the precompiled
menu is still built from float32 dummies misses the menu and compiles while serving. The correct
change rekeys the menu in the same edit and compiles nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import hlo_doctor.engine as bundled
from hlo_doctor.cli import main
from hlo_doctor.core.errors import InputError
from hlo_doctor.engines import call_with_progress, checked_config, engine_source_dir, load_engine

SMALL = dict(vocab_size=1024, hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
             mlp_dim=128, max_num_reqs=8, batch=8, prompt_len=4, max_tokens=4)
RUNNER_CONVERT = "            logits = logits.astype(jnp.float32)\n            with self.maybe_forbid_compile:\n"
MENU_DUMMY = "self._create_dummy_tensor((num_reqs, hsize), jnp.float32, logits_sharding)"


def _copy_tree(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(engine_source_dir(bundled), target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _patch(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def original_tokens() -> np.ndarray:
    result = bundled.run_offline_batch(bundled.EngineConfig(**SMALL))
    assert result.steady_state_compiles == 0, result.compile_reasons
    return result.tokens


def test_load_engine_defaults_to_the_bundled_package() -> None:
    assert load_engine() is bundled
    assert load_engine(None).EngineConfig is bundled.EngineConfig


def test_bad_engine_paths_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_engine(tmp_path / "missing")
    (tmp_path / "file.py").write_text("")
    with pytest.raises(InputError, match="not a directory"):
        load_engine(tmp_path / "file.py")
    with pytest.raises(InputError, match="not an engine source tree"):
        load_engine(tmp_path)
    broken = _copy_tree(tmp_path, "broken")
    (broken / "sampling.py").write_text("def sample(:\n")
    with pytest.raises(InputError, match="does not compile"):
        load_engine(broken)


def test_checked_config_turns_engine_errors_into_input_errors() -> None:
    with pytest.raises(InputError, match="above the largest num_reqs bucket"):
        checked_config(bundled, batch=128)
    with pytest.raises(InputError, match="engine config"):
        checked_config(bundled, no_such_field=1)


def test_copied_tree_loads_beside_the_original(tmp_path: Path) -> None:
    copy = load_engine(_copy_tree(tmp_path, "copy"))
    assert copy is not bundled and copy.__name__.startswith("hlo_doctor_engine_")
    assert copy.sample is not bundled.sample
    # Relative imports bind the copy's modules to the copy.
    assert copy.runner.sample is copy.sample
    assert engine_source_dir(copy) == (tmp_path / "copy").resolve()
    # A checkout root holding hlo_doctor/engine/ works too, and loads once.
    root = tmp_path / "checkout"
    shutil.copytree(tmp_path / "copy", root / "hlo_doctor" / "engine")
    assert load_engine(root) is load_engine(root / "hlo_doctor" / "engine")


def test_dropping_the_runner_convert_alone_misses_the_menu(tmp_path: Path, original_tokens: np.ndarray) -> None:
    tree = _copy_tree(tmp_path, "convert_removed")
    _patch(tree / "runner.py", RUNNER_CONVERT, "            with self.maybe_forbid_compile:\n")
    patched = load_engine(tree)
    # A long-lived engine pays the miss in its first batch; later batches hit the jit cache.
    engine = patched.OfflineEngine(patched.EngineConfig(**SMALL))
    engine.warmup()
    first, second = engine.run_batch(), engine.run_batch()
    assert first.steady_state_compiles >= 1 and second.steady_state_compiles == 0
    assert any(r.startswith("jit(sample): ") and "now bf16[8,1024]" in r and "before f32[8,1024]" in r
               for r in first.compile_reasons), first.compile_reasons
    # Widening is exact: the greedy tokens do not change, only the compile does.
    np.testing.assert_array_equal(first.tokens, original_tokens)
    np.testing.assert_array_equal(second.tokens, original_tokens)

    # run_offline_batch starts cold every time: the miss shows again.
    result = patched.run_offline_batch(patched.EngineConfig(**SMALL))
    assert result.steady_state_compiles >= 1, result.compile_reasons
    with pytest.raises(patched.RecompilationError, match=r"jit\(sample\)"):
        patched.run_offline_batch(patched.EngineConfig(**SMALL, check_recompilation=True))


def test_dropping_the_convert_and_rekeying_the_menu_compiles_nothing(
    tmp_path: Path, original_tokens: np.ndarray
) -> None:
    tree = _copy_tree(tmp_path, "rekeyed")
    _patch(tree / "runner.py", RUNNER_CONVERT, "            with self.maybe_forbid_compile:\n")
    _patch(tree / "compilation_manager.py", MENU_DUMMY,
           "self._create_dummy_tensor((num_reqs, hsize), runner.dtype, logits_sharding)")
    patched = load_engine(tree)
    result = patched.run_offline_batch(patched.EngineConfig(**SMALL, check_recompilation=True))
    assert result.steady_state_compiles == 0, result.compile_reasons
    np.testing.assert_array_equal(result.tokens, original_tokens)


def test_cli_engine_run_json(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    args = ["engine", "run", "--vocab", "1024", "--hidden", "64", "--layers", "1", "--batch", "6",
            "--max-num-reqs", "8", "--prompt-len", "4", "--max-tokens", "3", "--format", "json",
            "--output", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())
    assert summary["tokens_shape"] == [6, 3]
    assert summary["steady_state_compiles"] == 0
    assert summary["throughput_tok_s"] > 0 and summary["batch_ttft_ms"] > 0
    assert summary["engine_source"] == str(engine_source_dir(bundled))
    # Piped, the precompile shows one line when it starts and one when it is done: programs done / total
    # (9 for the one bucket, 8, and the rng split).
    assert "precompile (programs) 0/10\n" in result.stderr and "precompile (programs) 10/10 done" in result.stderr


def test_call_with_progress_passes_it_only_to_a_warmup_that_takes_it() -> None:
    def reporting(config: int, progress: object = None) -> tuple[int, object]:
        return config, progress

    def silent(config: int) -> int:
        return config

    def report(stage: str, done: int, total: int) -> None:
        pass

    assert call_with_progress(reporting, report, 3) == (3, report)
    assert call_with_progress(silent, report, 3) == 3
    assert call_with_progress(reporting, None, 3) == (3, None)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--batch", "65"], "above the largest num_reqs bucket"),
        (["--max-tokens", "0"], "max_tokens=0"),
        (["--vocab", "0"], "vocab_size=0"),
        (["--engine", "/nonexistent/engine"], "does not exist"),
    ],
)
def test_cli_engine_run_rejects_impossible_configs(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(main, ["engine", "run", *args])
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


def test_cli_check_recompilation_fails_a_tree_that_misses_the_menu(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path, "convert_removed_cli")
    _patch(tree / "runner.py", RUNNER_CONVERT, "            with self.maybe_forbid_compile:\n")
    args = ["engine", "run", "--engine", str(tree), "--vocab", "1024", "--hidden", "64", "--layers", "1",
            "--batch", "8", "--max-num-reqs", "8", "--prompt-len", "4", "--max-tokens", "2",
            "--check-recompilation"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "recompilation after warm-up" in result.output and "jit(sample)" in result.output
