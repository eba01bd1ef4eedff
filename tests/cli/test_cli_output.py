"""The CLI off a terminal and in CI: one line per finding, GitHub annotations, pyproject defaults,
plain progress lines, one vocabulary (--format table, -o -, an example in every --help)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.cli.progress import plain_progress

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "sample_traces" / "seed_v5e_b512"
ENGINE = REPO / "sample_traces" / "engine_b64_original_a"


def _run(args: list[str], env: dict[str, str] | None = None) -> click.testing.Result:
    return CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": "", **(env or {})}, catch_exceptions=False)


def test_diagnose_piped_is_one_line_per_finding() -> None:
    """Off a terminal the table would fold to 80 columns: each finding is one greppable line instead."""
    r = _run(["diagnose", str(ENGINE)])
    assert r.exit_code == 0
    lines = r.stderr.splitlines()
    # The engine trace's sources are this checkout's engine files: relative paths, ruff-style.
    assert "hlo_doctor/engine/runner.py:135: HD003 [high] program jit_convert_element_type" in r.stderr
    summary = next(i for i, line in enumerate(lines) if line.endswith("is recoverable"))
    assert summary >= 2 and all(line.startswith(("hlo_doctor/engine/", "HD0")) for line in lines[:summary])
    # After the summary: the fix's net promise where a what-if run priced its cost on this machine
    # (the capture's jax is this one's), then the note on compiler-inserted ops (no source line).
    assert all(line.startswith(("cpu: ", "fix bf16-greedy-sampler: ")) for line in lines[summary + 1:])
    assert lines[-1].startswith("cpu: ")


def test_diagnose_github_annotations_by_default_under_actions() -> None:
    r = _run(["diagnose", str(ENGINE)], env={"GITHUB_ACTIONS": "true"})
    annotations = r.stdout.splitlines()
    assert annotations[0].startswith("::error file=hlo_doctor/engine/runner.py,line=135,title=HD003")
    assert annotations[-1].startswith("::notice title=hlo-doctor diagnose::") and "findings" in annotations[-1]
    # Seed trace: sources of a machine this checkout does not mirror: annotations without a file.
    seed = _run(["diagnose", str(SEED), "--format", "github"]).stdout
    assert "::error title=HD002 copy.aliasing-input::copy.2 copies" in seed and "file=" not in seed


def test_output_dash_is_stdout_and_json_has_the_schema_key(tmp_path: Path) -> None:
    r = _run(["diagnose", str(SEED), "--format", "json", "-o", "-"])
    assert json.loads(r.stdout)["schema"] == "hlo-doctor.diagnosis/1"
    assert not Path("-").exists()
    assert json.loads(_run(["rules", "--format", "json"]).stdout)["schema"] == "hlo-doctor.rules/1"
    out = tmp_path / "rules.txt"
    assert _run(["rules", "-o", str(out)]).exit_code == 0 and "HD002" in out.read_text()


def test_old_format_names_still_work() -> None:
    assert _run(["diagnose", str(SEED), "--format", "rich"]).exit_code == 0
    assert _run(["rules", "--format", "rich"]).exit_code == 0


def test_sarif_exit_status_and_relative_uri(tmp_path: Path) -> None:
    r = _run(["diagnose", str(ENGINE), "--format", "sarif", "--fail-on", "high", "--source-root", str(REPO)])
    assert r.exit_code == 1
    run = json.loads(r.stdout)["runs"][0]
    assert run["invocations"][0]["exitCode"] == 1 and run["invocations"][0]["executionSuccessful"]
    uris = {res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for res in run["results"]
            if "physicalLocation" in res["locations"][0]}
    assert "hlo_doctor/engine/runner.py" in uris and uris <= {
        "hlo_doctor/engine/sampling.py", "hlo_doctor/engine/runner.py"}


def _project(tmp_path: Path, toml: str) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(toml)
    return tmp_path


def test_pyproject_defaults_for_diagnose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_project(tmp_path, '[tool.hlo-doctor]\nselect = ["HD002"]\n'
                                         '[tool.hlo-doctor.diagnose]\nfail-on = "high"\n'))
    r = _run(["diagnose", str(SEED), "--format", "json"])
    assert r.exit_code == 1  # fail-on from the diagnose table
    assert {f["code"] for f in json.loads(r.stdout)["findings"]} == {"HD002"}
    # A flag wins over the file.
    r2 = _run(["diagnose", str(SEED), "--format", "json", "--select", "HD003"])
    assert {f["code"] for f in json.loads(r2.stdout)["findings"]} == {"HD003"}


def test_pyproject_unknown_key_exits_2_with_a_suggestion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_project(tmp_path, '[tool.hlo-doctor]\nselct = ["HD002"]\n'))
    r = _run(["diagnose", str(SEED)])
    assert r.exit_code == 2
    assert "unknown key 'selct'" in r.stderr and "did you mean 'select'?" in r.stderr


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in group.commands.items():
        out.append((*prefix, name))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, (*prefix, name)))
    return out


@pytest.mark.parametrize("command", [(), *_commands(main)], ids=lambda c: " ".join(c) or "hlo-doctor")
def test_every_help_has_an_example(command: tuple[str, ...]) -> None:
    r = _run([*command, "--help"])
    assert r.exit_code == 0 and re.search(r"Examples:\n\s+hlo-doctor ", r.stdout)


def test_plain_progress_one_line_per_stage_change() -> None:
    lines: list[str] = []
    ticks = iter([0.0, 1.5, 2.5, 3.0, 9.5])  # read at the start and at each line
    from hlo_doctor.cli import progress as mod

    def record(text: str, **_: object) -> None:
        lines.append(text)

    original = mod.console.print
    mod.console.print = record  # type: ignore[method-assign]
    try:
        with plain_progress({"warmup": "warm-up"}, clock=lambda: next(ticks)) as update:
            update("warmup", 0, 3)
            update("warmup", 1, 3)
            update("warmup", 3, 3)
            update("capture", 0, 10)
            update("capture", 10, 10)
    finally:
        mod.console.print = original  # type: ignore[method-assign]
    assert lines == ["[    1.5s] warm-up 0/3", "[    2.5s] warm-up 3/3 done", "[    3.0s] capture 0/10",
                     "[    9.5s] capture 10/10 done"]


@pytest.mark.parametrize(("env", "coloured"), [({"FORCE_COLOR": "1"}, True),
                                               ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False), ({}, False)])
def test_no_color_and_force_color(env: dict[str, str], coloured: bool) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "GITHUB_ACTIONS")}
    r = subprocess.run([sys.executable, "-c", "from hlo_doctor.cli import main; main()", "diagnose", "/nonexistent"],
                       env={**base, **env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    assert r.returncode == 2 and "error:" in r.stderr
    # NO_COLOR takes colours away (bold may stay: no-color.org is about colour).
    assert bool(re.search(r"\x1b\[[0-9;]*(3[0-7]|9[0-7])m", r.stderr)) is coloured


def test_gate_annotations_under_github_actions() -> None:
    fixed, original = REPO / "sample_traces" / "engine_b64_fixed", ENGINE
    r = _run(["gate", str(fixed), str(original), "--top", "2"], env={"GITHUB_ACTIONS": "true"})
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[0].startswith("::error file=hlo_doctor/engine/compilation_manager.py,line=103,title=hlo-doctor gate%3A new-op::")
    assert lines[-1] == "::notice title=hlo-doctor gate::FAIL: 2 regressions"
    assert "hlo-doctor gate: FAIL: 2 regressions" in r.stderr  # the table is still in the log


def test_a_what_if_run_prints_nothing_of_xlas_own(tmp_path: Path) -> None:
    """A fresh process: the capture's reader loads jaxlib before the what-if run imports jax, and XLA's
    C++ INFO lines (the CPU client's device count) must not reach the output people read."""
    base = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "GITHUB_ACTIONS")}
    r = subprocess.run([sys.executable, "-c", "from hlo_doctor.cli import main; main()", "diagnose", str(ENGINE),
                        "--source-root", str(REPO)], env={**base, "PYTHONPATH": str(REPO)}, capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    import jax

    captured_with = json.loads((ENGINE / "run.json").read_text())["versions"]["jax"]
    # The what-if ran where the sample's jax is this one's (it imports jax after the reader's jaxlib).
    assert ("what-if run" in r.stderr) == (captured_with == jax.__version__)
    assert not [line for line in r.stderr.splitlines() if "pjrt_client" in line or re.match(r"[IWE]\d{4} ", line)]
