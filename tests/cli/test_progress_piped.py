"""Progress in a pipe, on a real target whose steps take a second: a line at least every interval
(HLO_DOCTOR_PROGRESS_INTERVAL), each saying what is left, read from the command's piped stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
