"""HLO_DOCTOR_MEASURE_SECONDS: the most seconds diagnose spends timing one fix (a replay's pairs, a
program or engine A/B's rounds); a value that is not a number of seconds above 0 is exit 2 before
anything is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_doctor.core.errors import InputError
from hlo_doctor.lint.measurement import BUDGET_ENV, DEFAULT_BUDGET_S, measure_budget

REPO = Path(__file__).resolve().parents[2]


def test_the_budget_is_the_default_or_a_number_of_seconds_above_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    assert measure_budget() == DEFAULT_BUDGET_S == 10.0
    monkeypatch.setenv(BUDGET_ENV, " 2.5 ")
    assert measure_budget() == 2.5
    for bad in ("abc", "0", "-1", "nan", "inf", "1e400"):
        monkeypatch.setenv(BUDGET_ENV, bad)
        with pytest.raises(InputError, match=BUDGET_ENV):
            measure_budget()


@pytest.mark.parametrize("command", [["diagnose", "sample_traces/seed_v5e_b512"],
                                     ["doctor", "--out", "runs/never-written"]])
def test_a_bad_budget_is_one_line_and_exit_2_before_any_work(command: list[str], tmp_path: Path) -> None:
    env = dict(os.environ, HLO_DOCTOR_MEASURE_SECONDS="ten", NO_COLOR="1")
    (tmp_path / "sample_traces").symlink_to(REPO / "sample_traces")
    done = subprocess.run([sys.executable, "-m", "hlo_doctor", *command], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "HLO_DOCTOR_MEASURE_SECONDS='ten'" in lines[0], done.stderr
    assert not (tmp_path / "runs").exists()  # doctor wrote nothing
