"""Progress in a pipe, on a real target whose steps take a second: a line at least every interval
(HLO_DOCTOR_PROGRESS_INTERVAL), each saying what is left, read from the command's piped stderr."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hlo_doctor.lint.store import FILE_NAME

PROGRAM = '''
import time

import jax
import jax.numpy as jnp

x = jnp.ones((256, 256))


@jax.jit
def matmul(a):
    return a @ a


def step():
    time.sleep(1.0)  # a slow step: what the progress lines must not go quiet through
    return matmul(x)
'''

LINE = re.compile(r"^\[\s*(\d+\.\d)s\] (.*)$")


def test_profile_in_a_pipe_says_what_is_left_every_interval(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    env["HLO_DOCTOR_PROGRESS_INTERVAL"] = "0.5"
    done = subprocess.run([sys.executable, "-m", "hlo_doctor.cli", "profile", "slow.py:step", "--steps", "4",
                           "--warmup", "2", "--out", "run", "--top", "1"], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = [(float(m.group(1)), m.group(2)) for m in map(LINE.match, done.stderr.splitlines()) if m]
    capture = [(t, text) for t, text in lines if text.startswith("capture (traced)")]
    assert capture[0][1] == "capture (traced) 0/4" and capture[-1][1] == "capture (traced) 4/4 done"
    # While the four 1-second steps run: lines in between, each with the time left at the pace so far.
    between = [text for _, text in capture[1:-1]]
    assert len(between) >= 4, done.stderr
    assert all(re.fullmatch(r"capture \(traced\) [0-3]/4, (~\d+ s left|\d+ s in)", text) for text in between), between
    assert any(text.endswith("s left") for text in between)
    # No gap between two lines much longer than the interval, from the first line to the last.
    times = [t for t, _ in lines]
    # (the four steps without these lines: one silent gap of 4 s)
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= 2.5, done.stderr


SAMPLER = '''
import jax
import jax.numpy as jnp

logits = jax.random.normal(jax.random.key(0), (64, 32000), jnp.float32).astype(jnp.bfloat16)


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1), logits


def step():
    return sample(logits.astype(jnp.float32))
'''


def test_what_is_timed_here_is_a_stage_of_its_own_and_what_is_reused_is_not(tmp_path: Path) -> None:
    """profile's report and diagnose time the fixes on this machine (replays of the capture's programs,
    up to the measuring budget each): each measurement is a stage of the progress, named for what it
    times, with its lines while it runs; what a diagnosis reads back from the store is timed again
    nowhere and shown as no stage."""
    (tmp_path / "sampler.py").write_text(SAMPLER)
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    env.update(HLO_DOCTOR_PROGRESS_INTERVAL="0.5", HLO_DOCTOR_MEASURE_SECONDS="1", XDG_CACHE_HOME=str(tmp_path / "cache"))

    def run(*args: str) -> list[tuple[float, str]]:
        done = subprocess.run([sys.executable, "-m", "hlo_doctor.cli", *args], cwd=tmp_path, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        stderr.append(done.stderr)
        return [(float(m.group(1)), m.group(2)) for m in map(LINE.match, done.stderr.splitlines()) if m]

    stderr: list[str] = []

    lines = run("profile", "sampler.py:step", "--steps", "5", "--warmup", "2", "--out", "run", "--top", "1")
    replay = [(t, text) for t, text in lines if text.startswith("measuring bf16-greedy-sampler: replaying ")]
    assert replay, lines
    first, last = replay[0][1], replay[-1][1]
    assert "jit_sample(" in first and first.endswith(" 0/1") and last.endswith(" 1/1 done"), replay
    # Within the measuring budget the environment sets, as diagnose's (the default would be 10 s).
    assert "(up to 1 s)" in first, first
    # Each measurement starts after the table is built, and the lines go on while it runs.
    texts = [text for _, text in lines]
    assert texts.index("building the table 1/1 done") < texts.index(first)
    times = [t for t, _ in lines]
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= 2.5, lines
    # The diagnosis of the same run reads what profile measured back (no stage of it) and times only
    # the fix it offers once the code is known (the eager astype's own fix).
    again = [text for _, text in run("diagnose", "run") if text.startswith("measuring")]
    assert again and not [text for text in again if text.startswith("measuring bf16-greedy-sampler")], again
    assert all(text.startswith("measuring eager-widening: ") for text in again), again
    # A report of a capture nothing has measured yet (the run copied without its measurements):
    # its first line names the capture, read, and its measurements follow as stages of their own.
    shutil.copytree(tmp_path / "run", tmp_path / "fresh", ignore=shutil.ignore_patterns(FILE_NAME, "report.html"))
    fresh = [text for _, text in run("report", "fresh", "-o", "fresh.html")]
    first_line = stderr[-1].splitlines()[0]
    assert first_line.startswith("capture: ") and "fresh" in first_line, stderr[-1]
    measured = [text for text in fresh if text.startswith("measuring bf16-greedy-sampler: replaying ")]
    assert measured and measured[0].endswith(" 0/1") and measured[-1].endswith(" 1/1 done"), fresh
    assert (tmp_path / "fresh.html").is_file()
