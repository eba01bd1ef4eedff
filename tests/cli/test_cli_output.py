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

from hlo_doctor.cli import Commands, main
from hlo_doctor.cli.progress import plain_progress

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "sample_traces" / "seed_v5e_b512"
ENGINE = REPO / "sample_traces" / "engine_b64_original_a"


def _run(args: list[str], env: dict[str, str] | None = None) -> click.testing.Result:
    return CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": "", **(env or {})}, catch_exceptions=False)


PROGRESS_LINE = re.compile(r"^\[ *\d+\.\ds\] ")


def test_diagnose_piped_is_one_line_per_finding() -> None:
    """Off a terminal the table would fold to 80 columns: each finding is one greppable line instead."""
    r = _run(["diagnose", str(ENGINE)])
    assert r.exit_code == 0
    # A diagnosis that runs past the progress interval (a loaded machine) prints its documented timed
    # lines (``[  15.0s] reading the capture, 15 s in``) among these: they are progress, not output.
    lines = [line for line in r.stderr.splitlines() if not PROGRESS_LINE.match(line)]
    # The engine trace's sources are this checkout's engine files: relative paths, ruff-style.
    assert "hlo_doctor/engine/runner.py:148: HD003 [high] program jit_convert_element_type" in r.stderr
    # The first line says which file was read (relative to the working folder).
    (xplane,) = ENGINE.glob("plugins/profile/*/*.xplane.pb")
    assert lines[0] == f"capture: {os.path.relpath(xplane)}"
    summary = next(i for i, line in enumerate(lines) if line.endswith("is recoverable"))
    assert summary >= 3 and all(line.startswith(("hlo_doctor/engine/", "HD0")) for line in lines[1:summary])
    # After the summary: the fix's net promise where a what-if run priced its cost on this machine
    # (the capture's jax is this one's), the note on compiler-inserted ops (no source line), and what
    # the what-if measured here or reused.
    assert all(line.startswith(("cpu: ", "fix bf16-greedy-sampler: ", "what-if: ")) for line in lines[summary + 1:])
    assert lines[-1].startswith(("cpu: ", "what-if: "))


def test_diagnose_github_annotations_by_default_under_actions() -> None:
    r = _run(["diagnose", str(ENGINE)], env={"GITHUB_ACTIONS": "true"})
    annotations = r.stdout.splitlines()
    assert annotations[0].startswith("::error file=hlo_doctor/engine/runner.py,line=148,title=HD003")
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
    for name, cmd in (group.load_all() if isinstance(group, Commands) else group.commands).items():
        out.append((*prefix, name))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, (*prefix, name)))
    return out


@pytest.mark.parametrize("command", [(), *_commands(main)], ids=lambda c: " ".join(c) or "hlo-doctor")
def test_every_help_has_an_example(command: tuple[str, ...]) -> None:
    r = _run([*command, "--help"])
    assert r.exit_code == 0 and re.search(r"Examples:\n\s+hlo-doctor ", r.stdout)


def _plain_lines(calls: list[tuple[float, str, int, int]], interval_s: float = 15.0) -> list[str]:
    """The lines :func:`plain_progress` prints for ``(time, stage, done, total)`` updates, on a clock
    that reads each update's time (0.0 at the start); the timer thread is off."""
    lines: list[str] = []
    now = [0.0]
    from hlo_doctor.cli import progress as mod

    def record(text: str, **_: object) -> None:
        lines.append(text)

    original = mod.console.print
    mod.console.print = record  # type: ignore[method-assign]
    try:
        with plain_progress({"warmup": "warm-up"}, clock=lambda: now[0], interval_s=interval_s,
                            timer=False) as update:
            for t, stage, done, total in calls:
                now[0] = t
                update(stage, done, total)
    finally:
        mod.console.print = original  # type: ignore[method-assign]
    return lines


def test_plain_progress_one_line_per_stage_change() -> None:
    lines = _plain_lines([(1.5, "warmup", 0, 3), (2.0, "warmup", 1, 3), (2.5, "warmup", 3, 3),
                          (3.0, "capture", 0, 10), (9.5, "capture", 10, 10)])
    assert lines == ["[    1.5s] warm-up 0/3", "[    2.5s] warm-up 3/3 done", "[    3.0s] capture 0/10",
                     "[    9.5s] capture 10/10 done"]


def test_plain_progress_says_what_is_left_every_interval() -> None:
    # 12 rounds of 20 s: a line at most every 15 s (here at each round past the interval), with the
    # time left at the pace so far; a stage run again after it finished starts over.
    calls = [(0.0, "rounds", 0, 12)] + [(20.0 * k, "rounds", k, 12) for k in range(1, 13)]
    lines = _plain_lines([*calls, (250.0, "warmup", 0, 2), (251.0, "warmup", 2, 2), (252.0, "warmup", 0, 2)])
    assert lines[0] == "[    0.0s] rounds 0/12"
    assert lines[1] == "[   20.0s] rounds 1/12, ~4 min left"     # 11 rounds at 20 s: 220 s
    assert lines[9] == "[  180.0s] rounds 9/12, ~60 s left"
    assert lines[11] == "[  220.0s] rounds 11/12, ~20 s left"
    assert lines[12] == "[  240.0s] rounds 12/12 done"
    assert lines[13:] == ["[  250.0s] warm-up 0/2", "[  251.0s] warm-up 2/2 done", "[  252.0s] warm-up 0/2"]
    # Updates closer together than the interval print nothing between the start and the end.
    fast = _plain_lines([(0.0, "rounds", 0, 4), (5.0, "rounds", 1, 4), (10.0, "rounds", 2, 4), (16.0, "rounds", 3, 4),
                         (18.0, "rounds", 4, 4)])
    assert fast == ["[    0.0s] rounds 0/4", "[   16.0s] rounds 3/4, ~5 s left", "[   18.0s] rounds 4/4 done"]


def test_progress_interval_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from hlo_doctor.cli.progress import INTERVAL_ENV, progress_interval
    from hlo_doctor.core.errors import InputError

    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    assert progress_interval() == 15.0
    monkeypatch.setenv(INTERVAL_ENV, "2.5")
    assert progress_interval() == 2.5
    for bad in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv(INTERVAL_ENV, bad)
        with pytest.raises(InputError, match=INTERVAL_ENV):
            progress_interval()


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
    assert lines[-1] == "::notice title=hlo-doctor gate::FAIL: 4 regressions"  # 2 new ops, 2 peaks
    assert "hlo-doctor gate: FAIL: 4 regressions" in r.stderr  # the table is still in the log


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
