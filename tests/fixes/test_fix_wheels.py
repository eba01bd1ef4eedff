"""apply-fix bf16-greedy-sampler against the real tpu-inference wheels from the package registry.

Per release (0.23.0, 0.24.0, 0.26.0 and the newest): apply, apply again (nothing changes), revert
(the exact original bytes). Then the transaction's edges on 0.24.0: dry run, upstream variant, a
half-fixed tree (the by-hand attempt on 0.24.0), code that does not match, read-only files, bad
targets, a revert after the files changed, the JSON output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from fix_previous_version import downgrade
from fixtures_wheels import PINNED_RELEASES, releases_under_test, tree_bytes, unpack

from hlo_doctor.cli import main
from hlo_doctor.core.errors import InputError
from hlo_doctor.fixes import (
    FixApplied,
    FixRefused,
    FixSkipped,
    apply_fix,
    available_fixes,
    detect_target,
    get_fix,
    revert_fix,
)

FIX = "bf16-greedy-sampler"
RUNNER = "tpu_inference/runner/tpu_runner.py"
SAMPLER = "tpu_inference/layers/jax/sample/sampling.py"
PRECOMPILE = "tpu_inference/runner/compilation_manager.py"
EAGER = "            logits = logits.astype(jnp.float32)\n            with self.maybe_forbid_compile:\n"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Unpacked wheels, one per release under test (never modified)."""
    base = tmp_path_factory.mktemp("wheels")
    return {v: unpack(v, base / v) for v in releases_under_test()}


def _copy(pristine: dict[str, Path], version: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine[version], tmp_path / version))


@pytest.mark.parametrize("version", releases_under_test())
def test_release_apply_twice_then_revert(pristine: dict[str, Path], tmp_path: Path, version: str) -> None:
    tree = _copy(pristine, version, tmp_path)
    original = tree_bytes(tree)

    first = apply_fix(FIX, tree)
    if version not in PINNED_RELEASES and isinstance(first, FixSkipped) and first.kind == "not-affected":
        # The newest release may have dropped the pattern: then it says why and touches nothing.
        assert "not affected" in first.reason and len(first.reason) > 40
        assert tree_bytes(tree) == original
        return
    assert isinstance(first, FixApplied), first
    assert first.release == version and first.target_kind == "tpu-inference unpacked wheel"
    assert sorted(tree.joinpath(p).relative_to(tree).as_posix() for p in map(str, first.files)) or True
    assert {p.relative_to(tree).as_posix() for p in first.files} == {RUNNER, SAMPLER, PRECOMPILE}
    assert first.parts_applied == (1, 2, 3)
    assert first.manifest_path is not None and first.manifest_path.is_file()
    runner = (tree / RUNNER).read_text()
    # No eager widening of the logits left in the runner, before sampling or after (logprobs or not).
    assert EAGER not in runner and re.search(r"^ *logits = logits\.astype\(jnp\.float32\)", runner, re.M) is None
    assert "self.runner.model_config.dtype" in (tree / PRECOMPILE).read_text().split("def _precompile_sampling")[1].split("\n    def ")[0]
    # The logprobs computation widens in-graph; its menu is keyed on what the runner now passes.
    consumer = (tree / SAMPLER).read_text().split("def compute_and_gather_logprobs(")[1].split("\ndef ")[0]
    assert ("    logits = logits.astype(jnp.float32)\n    logits = jax.lax.optimization_barrier(logits)\n"
            "    logprobs = compute_logprobs(logits)") in consumer
    gather = (tree / PRECOMPILE).read_text().split("def _precompile_gather_logprobs")[1].split("\n    def ")[0]
    assert re.search(r"jnp\.float32 if .*processed.* else self\.runner\.model_config\.dtype", gather), gather
    # Only the changed regions differ: comments and formatting elsewhere are byte-identical.
    after = tree_bytes(tree)
    changed = {k for k in original if original[k] != after.get(k)}
    assert changed == {RUNNER, SAMPLER, PRECOMPILE}
    for rel in changed:
        removed = set(original[rel].decode().splitlines()) - set(after[rel].decode().splitlines())
        assert len(removed) <= 2, (rel, removed)

    second = apply_fix(FIX, tree)
    assert isinstance(second, FixSkipped) and second.kind == "already-applied", second
    assert tree_bytes(tree) == after

    reverted = revert_fix(FIX, tree)
    assert isinstance(reverted, FixApplied) and reverted.reverted
    assert tree_bytes(tree) == original
    assert not (tree / ".hlo-doctor").exists()


@pytest.mark.parametrize("version", releases_under_test())
def test_tree_of_the_previous_fix_version_is_upgraded(pristine: dict[str, Path], tmp_path: Path, version: str) -> None:
    """The previous version left the runner's widening under `if logprobs:` (an eager program with
    logprobs on): applying again upgrades it without --complete, to the same bytes as a fresh apply,
    and --revert still restores the release's bytes."""
    tree, reference = _copy(pristine, version, tmp_path / "t"), _copy(pristine, version, tmp_path / "r")
    original = tree_bytes(tree)
    if not isinstance(apply_fix(FIX, reference), FixApplied):
        pytest.skip(f"{version}: the fix does not apply")
    assert isinstance(apply_fix(FIX, tree), FixApplied)
    downgrade(tree / RUNNER, tree / SAMPLER, tree / PRECOMPILE)
    assert "if tpu_sampling_metadata.logprobs:\n            logits = logits.astype(jnp.float32)" in (tree / RUNNER).read_text()
    upgraded = apply_fix(FIX, tree)
    assert isinstance(upgraded, FixApplied) and not upgraded.completed_partial, upgraded
    assert any("earlier version of this fix" in note for note in upgraded.notes)
    assert {p.relative_to(tree).as_posix() for p in upgraded.files} == {RUNNER, SAMPLER, PRECOMPILE}
    sources = lambda root: {k: v for k, v in tree_bytes(root).items() if not k.startswith(".hlo-doctor")}  # noqa: E731
    assert sources(tree) == sources(reference)
    assert isinstance(revert_fix(FIX, tree), FixApplied)
    assert tree_bytes(tree) == original


def test_registry() -> None:
    assert FIX in available_fixes()
    assert get_fix(FIX).fix_id == FIX
    with pytest.raises(InputError, match="unknown fix"):
        get_fix("no-such-fix")


def test_dry_run_prints_the_diff_and_changes_nothing(pristine: dict[str, Path], tmp_path: Path) -> None:
    tree = _copy(pristine, "0.24.0", tmp_path)
    original = tree_bytes(tree)
    result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(tree), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"--- a/{RUNNER}" in result.stdout and f"+++ b/{SAMPLER}" in result.stdout
    assert "-            logits = logits.astype(jnp.float32)" in result.stdout
    assert tree_bytes(tree) == original


def test_upstream_variant_keeps_sample_contract(pristine: dict[str, Path], tmp_path: Path) -> None:
    tree = _copy(pristine, "0.24.0", tmp_path)
    sampler_before = (tree / SAMPLER).read_bytes()
    result = apply_fix(FIX, tree, variant="upstream")
    assert isinstance(result, FixApplied)
    # The released sample() already takes the argmax before its widening: with bf16 in, that widening
    # is the output materialization, so the upstream variant leaves sample() as it is; only the
    # logprobs computation below it gets its in-graph widening.
    assert {p.relative_to(tree).as_posix() for p in result.files} == {RUNNER, SAMPLER, PRECOMPILE}
    sample_of = lambda text: text.split("def sample(")[1].split("\ndef ")[0]  # noqa: E731
    assert sample_of((tree / SAMPLER).read_text()) == sample_of(sampler_before.decode())
    assert result.parts_applied == (1, 2, 3)
    assert "sampler.logprobs_gated_output" not in result.applied
    # Upgrading to the full variant later is named, not silently done.
    upgrade = apply_fix(FIX, tree, variant="full")
    assert isinstance(upgrade, FixRefused) and upgrade.kind == "half-fixed"
    assert "upstream variant is applied" in upgrade.reason
    done = apply_fix(FIX, tree, variant="full", complete=True)
    assert isinstance(done, FixApplied) and {p.relative_to(tree).as_posix() for p in done.files} == {SAMPLER}
    # Revert goes back to the release's bytes, across both runs.
    revert_fix(FIX, tree)
    assert (tree / SAMPLER).read_bytes() == sampler_before
    assert not (tree / ".hlo-doctor").exists()


def test_half_fixed_tree_is_named_and_completed_only_on_request(pristine: dict[str, Path], tmp_path: Path) -> None:
    tree = _copy(pristine, "0.24.0", tmp_path)
    runner = tree / RUNNER
    # The by-hand attempt on 0.24.0: the runner's eager convert removed, the menu left at float32.
    text = runner.read_text()
    assert text.count(EAGER) == 1
    runner.write_text(text.replace(EAGER, "            with self.maybe_forbid_compile:\n"))
    half_fixed = tree_bytes(tree)

    result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(tree)])
    assert result.exit_code == 1, result.output
    assert "half-fixed" in result.stderr and "still keyed on" in result.stderr and "--complete" in result.stderr
    assert tree_bytes(tree) == half_fixed

    refused = apply_fix(FIX, tree)
    assert isinstance(refused, FixRefused) and refused.kind == "half-fixed"
    states = {e.element: e.state for e in refused.elements}
    assert states["runner.eager_widening"] == "fixed" and states["precompile.sampling_dtype"] == "original"

    completed = apply_fix(FIX, tree, complete=True)
    assert isinstance(completed, FixApplied) and completed.completed_partial
    assert "runner.eager_widening" not in completed.applied
    assert isinstance(apply_fix(FIX, tree), FixSkipped)
    assert isinstance(revert_fix(FIX, tree), FixApplied)
    assert tree_bytes(tree) == half_fixed


def test_code_that_does_not_match_is_refused_with_the_anchors(pristine: dict[str, Path], tmp_path: Path) -> None:
    tree = _copy(pristine, "0.24.0", tmp_path)
    precompile = tree / PRECOMPILE
    precompile.write_text(precompile.read_text().replace("def _precompile_sampling(", "def _precompile_sampler_v2("))
    before = tree_bytes(tree)
    result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(tree), "--format", "json"])
    assert result.exit_code == 2, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "refused" and payload["kind"] == "anchors-missing"
    assert any("_precompile_sampling" in a for a in payload["missing_anchors"])
    assert tree_bytes(tree) == before


def test_full_variant_refuses_when_returned_logits_are_read_without_logprobs(
    pristine: dict[str, Path], tmp_path: Path
) -> None:
    tree = _copy(pristine, "0.24.0", tmp_path)
    runner = tree / RUNNER
    text = runner.read_text()
    anchor = "        # Update the cache state concurrently. Code above will not block until"
    runner.write_text(text.replace(anchor, "        _debug_logits = processed_logits\n" + anchor, 1))
    before = tree_bytes(tree)
    result = apply_fix(FIX, tree)
    assert isinstance(result, FixRefused) and result.kind == "unsafe" and "processed_logits" in result.reason
    assert tree_bytes(tree) == before
    assert isinstance(apply_fix(FIX, tree, variant="upstream"), FixApplied)


def test_read_only_file_is_a_clear_error_and_nothing_changes(pristine: dict[str, Path], tmp_path: Path) -> None:
    tree = _copy(pristine, "0.24.0", tmp_path)
    sampler = tree / SAMPLER
    os.chmod(sampler, 0o444)
    before = tree_bytes(tree)
    try:
        result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(tree)])
        # Root ignores mode bits; the fix honours them anyway (see hlo_doctor/fixes/transaction.py).
        assert result.exit_code == 2, result.output
        assert "read-only" in result.stderr and "sampling.py" in result.stderr
        assert "Traceback" not in result.output
        assert tree_bytes(tree) == before
        assert not list(tree.rglob("*.hlo-doctor-tmp"))
    finally:
        os.chmod(sampler, 0o644)


@pytest.mark.parametrize("kind", ["missing", "file", "unknown"])
def test_bad_targets_are_one_line_errors(tmp_path: Path, kind: str) -> None:
    if kind == "missing":
        target, expected = tmp_path / "nope", "does not exist"
    elif kind == "file":
        target, expected = tmp_path / "file.py", "is not a directory"
        target.write_text("x = 1\n")
    else:
        target, expected = tmp_path / "other", "is not a tpu-inference tree"
        (target / "runner").mkdir(parents=True)
        (target / "runner" / "compilation_manager.py").write_text("x = 1\n")
    before = tree_bytes(tmp_path)
    result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(target)])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and "Traceback" not in result.output
    assert tree_bytes(tmp_path) == before


def test_revert_refuses_when_the_files_changed_since(pristine: dict[str, Path], tmp_path: Path) -> None:
    tree = _copy(pristine, "0.24.0", tmp_path)
    assert isinstance(apply_fix(FIX, tree), FixApplied)
    (tree / SAMPLER).write_text((tree / SAMPLER).read_text() + "\n# local edit\n")
    before = tree_bytes(tree)
    result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(tree), "--revert"])
    assert result.exit_code == 2 and "changed since the fix was applied" in result.stderr
    assert tree_bytes(tree) == before
    nothing = revert_fix(FIX, _copy(pristine, "0.24.0", tmp_path / "clean"))
    assert isinstance(nothing, FixSkipped) and nothing.kind == "nothing-to-revert"


def test_target_kinds_and_releases(pristine: dict[str, Path], tmp_path: Path) -> None:
    wheel_tree = _copy(pristine, "0.24.0", tmp_path / "w")
    assert detect_target(wheel_tree).kind == "tpu-inference unpacked wheel"
    # An installed package: the package folder in site-packages beside its dist-info.
    site = tmp_path / "venv" / "lib" / "site-packages"
    shutil.copytree(wheel_tree, site)
    installed = detect_target(site / "tpu_inference")
    assert installed.kind == "tpu-inference installed package" and installed.release == "0.24.0"
    # A git checkout: version from pyproject.toml.
    checkout = tmp_path / "checkout"
    shutil.copytree(wheel_tree / "tpu_inference", checkout / "tpu_inference")
    (checkout / "pyproject.toml").write_text('[project]\nname = "tpu-inference"\nversion = "0.24.0"\n')
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    found = detect_target(checkout)
    assert found.kind == "tpu-inference git checkout" and found.release == "0.24.0"
    result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(checkout), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "applied" and payload["release"] == "0.24.0"
    assert payload["parts_applied"] == [1, 2, 3] and payload["diff"].startswith("--- a/tpu_inference/")


def test_syntax_error_in_a_target_file_is_a_clear_error(pristine: dict[str, Path], tmp_path: Path) -> None:
    tree = _copy(pristine, "0.24.0", tmp_path)
    sampler = tree / SAMPLER
    sampler.write_text(sampler.read_text() + "\ndef broken(:\n")
    before = tree_bytes(tree)
    result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(tree)])
    assert result.exit_code == 2, result.output
    assert "does not parse as Python" in result.stderr and "sampling.py" in result.stderr
    assert tree_bytes(tree) == before


def test_patched_copy_refuses_a_non_empty_destination(pristine: dict[str, Path], tmp_path: Path) -> None:
    from hlo_doctor.fixes import patched_copy

    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine\n")
    with pytest.raises(InputError, match="not empty"):
        patched_copy(FIX, pristine["0.24.0"], dest)
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]


def test_widening_gated_on_do_sampling_is_named_and_not_completed(pristine: dict[str, Path], tmp_path: Path) -> None:
    """The by-hand attempt on 0.23.0: sample()'s widening made conditional on do_sampling."""
    tree = _copy(pristine, "0.23.0", tmp_path)
    sampler = tree / SAMPLER
    text = sampler.read_text()
    widening = "    logits = logits.astype(jnp.float32)\n    if not tpu_sampling_metadata.do_sampling:\n"
    assert text.count(widening) == 1
    sampler.write_text(
        text.replace(
            widening,
            "    if tpu_sampling_metadata.do_sampling:\n        logits = logits.astype(jnp.float32)\n"
            "    if not tpu_sampling_metadata.do_sampling:\n",
        )
    )
    before = tree_bytes(tree)
    for extra in ([], ["--complete"]):
        result = CliRunner().invoke(main, ["apply-fix", FIX, "--target", str(tree), *extra])
        assert result.exit_code == 1, result.output
        assert "conditional" in result.stderr and "0.23.0" in result.stderr
        assert tree_bytes(tree) == before
