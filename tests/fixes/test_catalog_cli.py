"""The catalog from the command line, on a real profiled run of a tiny decode step
(tests/fixes/programs/decode_step.py: an undonated loop state and an eager widening before a
jitted argmax): ``diagnose`` names the fix that applies to each finding's own line, ``apply-fix FIX
FILE`` (dry run, write, revert, bad input) and ``apply-fix --from RUN`` (refused when the file
changed since the run; applied, outputs bit for bit, findings gone after a second profile)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import click
import numpy as np
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main

PROGRAM = Path(__file__).parent / "programs" / "decode_step.py"
ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str]) -> click.testing.Result:
    return CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": ""}, catch_exceptions=False)


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _profile(folder: Path, out: str) -> Path:
    r = _run(["profile", "decode_step.py:step", "--steps", "2", "--warmup", "1", "--out", out])
    assert r.exit_code == 0, r.output
    return folder / out


def _findings(run: Path) -> list[dict[str, object]]:
    r = _run(["diagnose", str(run), "--format", "json", "--no-what-if"])
    assert r.exit_code == 0, r.output
    return list(json.loads(r.stdout)["findings"])


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A project folder holding the program and one profiled run of it."""
    folder = tmp_path_factory.mktemp("project")
    shutil.copy2(PROGRAM, folder / "decode_step.py")
    os.utime(folder / "decode_step.py", (0, 0))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.syspath_prepend(str(folder))
        run = _profile(folder, "run")
    return folder, run


@pytest.fixture()
def here(project: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    folder, run = project
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    # Each test starts from the program as written, not newer than the run.
    shutil.copy2(PROGRAM, folder / "decode_step.py")
    os.utime(folder / "decode_step.py", (0, 0))
    shutil.rmtree(folder / ".hlo-doctor", ignore_errors=True)
    return folder, run


def test_diagnose_names_the_fix_for_each_findings_own_line(here: tuple[Path, Path]) -> None:
    folder, run = here
    by_code = {f["code"]: f for f in _findings(run)}
    assert by_code["HD009"]["fix"] == "donate-state"
    # The eager astype: one cause, two rules, the same file fix; never the sampler fix of another tree.
    assert by_code["HD003"]["fix"] == by_code["HD001"]["fix"] == "eager-widening"
    extra = by_code["HD009"]["extra"]
    assert isinstance(extra, dict) and extra["fix_safety"] == "safe"
    assert extra["fix_command"] == f"hlo-doctor apply-fix donate-state decode_step.py:{by_code['HD009']['source'].rsplit(':', 1)[1]}"  # type: ignore[union-attr]
    assert by_code["HD004"]["fix"] == ""  # its line is the argmax in sample(): nothing to change there
    text = _run(["diagnose", str(run), "--no-what-if"]).stderr
    assert "[fixable: donate-state]" in text and "[fixable: eager-widening]" in text
    sarif = json.loads(_run(["diagnose", str(run), "--format", "sarif", "--no-what-if"]).stdout)
    fixes = {r["ruleId"]: r.get("properties", {}).get("fix") for r in sarif["runs"][0]["results"]}
    assert fixes["HD009"] == "donate-state" and fixes["HD003"] == "eager-widening"


def test_apply_fix_on_a_file_dry_run_write_revert(here: tuple[Path, Path]) -> None:
    folder, _ = here
    path = folder / "decode_step.py"
    original = path.read_bytes()
    loop = _line(path, "jax.lax.fori_loop")
    r = _run(["apply-fix", "donate-state", f"decode_step.py:{loop}", "--dry-run"])
    assert r.exit_code == 0 and '+@functools.partial(jax.jit, static_argnames=("steps",), donate_argnames="cache")' \
        in r.stdout
    assert path.read_bytes() == original
    r = _run(["apply-fix", "donate-state", "decode_step.py"])  # stdout is not a terminal: a dry run
    assert r.exit_code == 0 and "donate_argnames" in r.stdout and path.read_bytes() == original
    r = _run(["apply-fix", "donate-state", f"decode_step.py:{loop}", "--write"])
    assert r.exit_code == 0, r.output
    assert 'donate_argnames="cache"' in path.read_text()
    again = _run(["apply-fix", "donate-state", f"decode_step.py:{loop}", "--write"])
    assert again.exit_code == 0 and "already" in again.stderr
    r = _run(["apply-fix", "donate-state", "decode_step.py", "--revert"])
    assert r.exit_code == 0 and path.read_bytes() == original and not (folder / ".hlo-doctor").exists()


def test_apply_fix_that_cannot_apply_exits_2_and_leaves_the_file(here: tuple[Path, Path]) -> None:
    folder, _ = here
    path = folder / "decode_step.py"
    original = path.read_bytes()
    cases = [
        (["donate-state", f"decode_step.py:{_line(path, 'def make')}"], "not in a function wrapped by jax.jit"),
        (["eager-widening", f"decode_step.py:{_line(path, 'cache = decode(cache, 8)')}"], "holds no widening"),
        (["argmax-without-softmax", "decode_step.py", "--write"], "nothing in the file"),
        (["bf16-greedy-sampler", "decode_step.py"], "edits a project"),
    ]
    for args, reason in cases:
        r = _run(["apply-fix", *args, "--write"] if "--write" not in args else ["apply-fix", *args])
        assert r.exit_code == 2, (args, r.output)
        assert reason in r.stderr, (args, r.stderr)
        assert path.read_bytes() == original


def test_apply_from_run_refused_when_the_file_changed_then_applied(here: tuple[Path, Path]) -> None:
    folder, run = here
    path = folder / "decode_step.py"
    original = path.read_text()
    # The file changed since the run: the lines the diagnosis names hold something else now.
    path.write_text("# edited after the run\n" + original)
    changed = path.read_bytes()
    r = _run(["apply-fix", "--from", str(run), "--write"])
    assert r.exit_code == 2, r.output
    assert "nothing was written" in r.stderr and "decode_step.py modified after the run" in r.stderr
    assert path.read_bytes() == changed
    # The same from diagnose's JSON, the file's time set back: the lines themselves are checked.
    path.write_text(original)
    os.utime(path, (0, 0))
    diagnosis = folder / "diagnosis.json"
    diagnosis.write_text(_run(["diagnose", str(run), "--format", "json", "--no-what-if"]).stdout)
    path.write_text("# edited after the run\n" + original)
    os.utime(path, (0, 0))
    r = _run(["apply-fix", "--from", str(diagnosis), "--write"])
    assert r.exit_code == 2 and "holds no widening" in r.stderr, r.output
    assert path.read_text() == "# edited after the run\n" + original
    path.write_text(original)
    os.utime(path, (0, 0))

    dry = _run(["apply-fix", "--from", str(run)])
    assert dry.exit_code == 0 and "-    logits = logits.astype(jnp.float32)" in dry.stdout
    assert path.read_text() == original
    r = _run(["apply-fix", "--from", str(run), "--write", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    statuses = {f["code"]: f["status"] for f in doc["findings"]}
    # (A loaded machine can add HD015, host-bound, which has no fix: only these four are this test's.)
    assert {c: statuses.get(c) for c in ("HD009", "HD003", "HD001", "HD004")} == {
        "HD009": "applied", "HD003": "applied", "HD001": "applied", "HD004": "no-fix"}
    assert all(s in ("applied", "no-fix") for s in statuses.values()), statuses
    fixed = path.read_text()
    assert 'donate_argnames="cache"' in fixed and "logits.astype" not in fixed

    # Outputs bit for bit, over several inputs.
    (folder / "before.py").write_text(original)
    before, after = _load(folder / "before.py", "decode_before"), _load(path, "decode_after")
    for seed in (0, 1, 2):
        cache, logits = before.make(seed)
        want = [np.asarray(x).tobytes() for x in before.run(cache + 0.0, logits)]
        got = [np.asarray(x).tobytes() for x in after.run(cache + 0.0, logits)]
        assert want == got, seed

    # Profiled again: the findings the fixes were for are gone.
    codes = {f["code"] for f in _findings(_profile(folder, "run_after"))}
    assert not codes & {"HD009", "HD003", "HD001", "HD004"}, codes

    # Reverted in the reverse order, back to the bytes as written.
    assert _run(["apply-fix", "eager-widening", "decode_step.py", "--revert"]).exit_code == 0
    assert _run(["apply-fix", "donate-state", "decode_step.py", "--revert"]).exit_code == 0
    assert path.read_text() == original


def test_the_bundled_engine_keeps_its_tree_fix_and_no_fix_outside_the_project(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    trace = ROOT / "sample_traces" / "engine_b64_original_a"
    monkeypatch.chdir(ROOT)
    hd003 = next(f for f in _findings(trace) if f["code"] == "HD003")
    assert hd003["fix"] == "bf16-greedy-sampler"
    assert hd003["extra"]["fix_command"] == "hlo-doctor apply-fix bf16-greedy-sampler --target hlo_doctor/engine"  # type: ignore[index]
    # The same files seen from another project: not a file that project edits, so no fix.
    r = _run(["diagnose", str(trace), "--format", "json", "--source-root", str(tmp_path), "--no-what-if"])
    assert all(f["fix"] == "" for f in json.loads(r.stdout)["findings"])


@pytest.fixture(autouse=True)
def _forget_modules() -> object:
    yield
    for name in ("decode_before", "decode_after", "decode_step"):
        sys.modules.pop(name, None)
