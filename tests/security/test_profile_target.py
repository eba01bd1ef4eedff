"""Threat: the profiled target takes the command over.

``profile`` runs the user's step function in its own process. A step that prints must not corrupt
``--format json`` on stdout; one that calls ``sys.exit`` must not end hlo-doctor with exit 0 and no
output; one that never returns is stopped by ``--timeout`` (even when stuck outside Python); SIGTERM
and Ctrl-C leave no ``.partial-*`` folder behind. Each case runs the CLI as a real process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from threats import REPO, cli

TARGET = '''
import os, signal, sys, time
from pathlib import Path
import jax.numpy as jnp

x = jnp.ones((8, 8))

def printing():
    print("hello from print")
    os.write(1, b"hello from fd 1\\n")
    return x * 2

def exiting():
    sys.exit(0)

def hanging():
    Path(os.environ["STARTED"]).write_text("started")
    time.sleep(3600)
    return x

def stuck():
    # As a step stuck in native code: the alarm never reaches Python in this thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(3600)
    return x
'''


@pytest.fixture()
def target(tmp_path: Path) -> Path:
    path = tmp_path / "target.py"
    path.write_text(TARGET)
    return path


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.name == "run")


def test_a_step_that_prints_does_not_break_json_on_stdout(tmp_path: Path, target: Path) -> None:
    r = cli("profile", f"{target}:printing", "--steps", "2", "--warmup", "1", "--out", str(tmp_path / "run"),
            "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == "hlo-doctor.opstats/1"
    assert "hello from print" in r.stderr and "hello from fd 1" in r.stderr


def test_a_step_that_exits_is_an_input_error(tmp_path: Path, target: Path) -> None:
    r = cli("profile", f"{target}:exiting", "--steps", "2", "--out", str(tmp_path / "run"), "--format", "json")
    assert r.returncode == 2 and "called sys.exit(0)" in r.stderr and r.stdout == ""
    assert leftovers(tmp_path) == []


def test_a_target_that_exits_on_import_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "script.py"
    path.write_text("import sys\nsys.exit(0)\n")
    r = cli("profile", f"{path}:step", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "called sys.exit(0) on import" in r.stderr


@pytest.mark.parametrize("where", ["target", "library"])
def test_a_syntax_error_names_the_file_that_has_it(tmp_path: Path, where: str) -> None:
    # A library the target imports may fail to compile on this Python (a package built for
    # another one): the message names that file, not the target.
    (tmp_path / "brokenlib.py").write_text("def f(:\n    pass\n")
    path = tmp_path / "script.py"
    path.write_text("def f(:\n" if where == "target" else "import brokenlib\n\ndef step():\n    return 1\n")
    r = cli("profile", f"{path}:step", "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stderr
    if where == "target":
        assert f"TARGET file {path} has a syntax error (line 1)" in r.stderr
    else:
        assert "brokenlib.py, which has a syntax error (line 1)" in r.stderr and "reinstall" in r.stderr


def test_a_step_that_never_returns_is_stopped_by_timeout(tmp_path: Path, target: Path) -> None:
    t0 = time.monotonic()
    r = cli("profile", f"{target}:hanging", "--steps", "2", "--warmup", "1", "--out", str(tmp_path / "run"),
            "--timeout", "1", env={"STARTED": str(tmp_path / "started")})
    assert r.returncode == 2 and "did not return within --timeout 1 s" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60
    assert leftovers(tmp_path) == []


def test_a_step_stuck_outside_python_is_stopped_by_the_watchdog(tmp_path: Path, target: Path) -> None:
    r = cli("profile", f"{target}:stuck", "--steps", "1", "--warmup", "1", "--out", str(tmp_path / "run"),
            "--timeout", "1")
    assert r.returncode == 2 and "stuck outside Python" in r.stderr, r.stderr
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_a_bad_timeout_is_a_usage_error(tmp_path: Path, target: Path, value: str) -> None:
    r = cli("profile", f"{target}:printing", "--out", str(tmp_path / "run"), f"--timeout={value}")
    assert r.returncode == 2 and "--timeout" in r.stderr


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_ctrl_c_leave_no_partial_folder(tmp_path: Path, target: Path, sig: int, code: int) -> None:
    started = tmp_path / "started"
    env = {"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "STARTED": str(started)}
    # A run started in a shell's background without job control (as a CI script may be) gives pytest's
    # workers SIGINT ignored, and a child inherits that: start it with SIGINT at its default, as a
    # terminal's Ctrl-C finds it.
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from hlo_doctor.cli import main; sys.argv[0]='hlo-doctor'; main()",
         "profile", f"{target}:hanging", "--steps", "2", "--warmup", "0", "--out", str(tmp_path / "run")],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), "the step never started"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=180)  # stopping the profiler on a loaded machine can take a minute
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert leftovers(tmp_path) == []
