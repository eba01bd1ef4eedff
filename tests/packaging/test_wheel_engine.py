"""The engine's commands (``engine run``, ``doctor``) from a plain install of the built wheel in a
fresh environment: the bundled engine is loaded from the installed package, not from the checkout.

A file of its own so that it runs beside ``test_wheel.py`` (each builds and installs its own wheel;
see :mod:`wheel_install`). Small sizes: XLA:CPU compiles the engine's precompiled menu on each run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from wheel_install import Installed, build, install, run

SMALL = ["--vocab", "1024", "--batch", "8", "--max-tokens", "4"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    return install(build(tmp_path_factory.mktemp("build")).wheel, tmp_path_factory.mktemp("installed"))


def test_engine_run_and_doctor_run_from_the_install(env: Installed) -> None:
    ran = run(env, "engine", "run", *SMALL, "--max-num-reqs", "8", "--format", "json", "-o", "engine.json")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((env.work / "engine.json").read_text())
    doctor = run(env, "doctor", "--out", "doc", *SMALL, "--rounds", "2", "--steps", "2", timeout=600)
    assert "Traceback" not in doctor.stderr and "internal error" not in doctor.stderr, doctor.stderr[-3000:]
    doc = json.loads((env.work / "doc" / "doctor.json").read_text())
    # Exit 0 verified, 1 a check failed (a 2-round A/B on a shared machine may miss the TTFT bound).
    assert doctor.returncode == doc["exit_code"] and doctor.returncode in (0, 1), doctor.stderr[-3000:]
    engine_file = Path(doc["engine"])
    assert engine_file.is_relative_to(env.root), doc["engine"]  # the installed engine, not the checkout's
    page = run(env, "report", "doc", "-o", "doctor.html")
    assert page.returncode == 0 and "<table" in (env.work / "doctor.html").read_text(), page.stderr[-2000:]
