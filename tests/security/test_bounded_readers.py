"""Threat: a capture or a settings file made to never finish reading, or to exhaust the process.

A FIFO planted as a host's ``.xplane.pb`` or as a trace, one trace event with a 4 GiB name in a 4 MiB
``.json.gz``, JSON and TOML nested past the interpreter's stack (``report`` input, ``gate --policy``,
pyproject.toml): each is exit 2 with one line naming the file (or, with ``--skip-bad-hosts``, the host
left out and said), within a deadline the test holds with a subprocess timeout.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from threats import REPO, cli

RUN = REPO / "sample_traces" / "engine_b64_original_a"
OTHER = REPO / "sample_traces" / "engine_b64_original_b"


def one_line_error(r: subprocess.CompletedProcess[str], *names: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    for name in names:
        assert name in lines[0], lines[0]


def fifo_run(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    xplane = next(run.glob("plugins/profile/*/*.xplane.pb"))
    fifo = xplane.parent / "evil.xplane.pb"
    os.mkfifo(fifo)
    return run, fifo


@pytest.mark.parametrize("extra", [(), ("--jobs", "2")])
def test_a_fifo_planted_as_a_host_file_is_named(tmp_path: Path, extra: tuple[str, ...]) -> None:
    run, fifo = fifo_run(tmp_path)
    one_line_error(cli("stats", str(run), *extra, timeout=120), str(fifo), "FIFO")


@pytest.mark.parametrize("extra", [(), ("--jobs", "2")])
def test_a_fifo_is_left_out_with_skip_bad_hosts(tmp_path: Path, extra: tuple[str, ...]) -> None:
    run, fifo = fifo_run(tmp_path)
    r = cli("stats", str(run), "--skip-bad-hosts", *extra, "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert str(fifo) in r.stdout and "FIFO" in r.stdout and "\"rows\"" in r.stdout  # named in the JSON


def test_a_fifo_planted_as_a_trace(tmp_path: Path) -> None:
    fifo = tmp_path / "evil.trace.json"
    os.mkfifo(fifo)
    folder = tmp_path / "logs"
    folder.mkdir()
    one_line_error(cli("stats", str(fifo), timeout=60))


def test_one_event_with_a_4_gib_name(tmp_path: Path) -> None:
    """4 MiB of gzip (members concatenated: each inflates to 64 MiB of one string) holding one event
    whose name is 4 GiB: refused once 64 MiB of it were read, in seconds and bounded memory."""
    path = tmp_path / "huge.trace.json.gz"
    block = gzip.compress(b"a" * (64 << 20), compresslevel=9)
    with path.open("wb") as f:
        f.write(gzip.compress(b'{"traceEvents":[{"ph":"X","pid":1,"tid":1,"ts":0,"dur":1,"name":"'))
        for _ in range(64):
            f.write(block)
        f.write(gzip.compress(b'"}]}'))
    assert path.stat().st_size < 5 << 20
    start = time.monotonic()
    r = cli("stats", str(path), timeout=120)
    one_line_error(r, str(path), "longer than 64 MiB")
    assert time.monotonic() - start < 60


def test_a_huge_top_level_value_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "meta.trace.json"
    path.write_bytes(b'{"metadata": "' + b"x" * (80 << 20) + b'", "traceEvents": []}')
    one_line_error(cli("stats", str(path), timeout=120), str(path), "longer than 64 MiB")


def test_deep_json_given_to_report(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    one_line_error(cli("report", str(path), "-o", str(tmp_path / "r.html"), timeout=60), str(path), "nested")
    path.write_text('{"schema": "hlo-doctor.gate/1", "x": ' + "{\"a\": " * 100_000 + "1" + "}" * 100_001)
    one_line_error(cli("report", str(path), "-o", str(tmp_path / "r.html"), timeout=60), str(path), "nested")


def test_deep_toml_policy_and_pyproject(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    one_line_error(cli("gate", str(RUN), str(OTHER), "--policy", str(policy), timeout=120), str(policy), "nested")
    project = tmp_path / "proj"
    project.mkdir()
    (project / ".git").mkdir()
    shutil.copy(policy, project / "pyproject.toml")
    r = subprocess.run([*_cli_argv(), "gate", str(RUN), str(OTHER)], cwd=project, capture_output=True, text=True,
                       env=_env(), timeout=120, check=False)
    one_line_error(r, "pyproject.toml", "nested")


def _cli_argv() -> list[str]:
    import sys

    return [sys.executable, "-c", "import sys; from hlo_doctor.cli import main; sys.argv[0] = 'hlo-doctor'; main()"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "COLUMNS": "200"}
