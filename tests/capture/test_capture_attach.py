"""profile --attach against a real serving process on 127.0.0.1, and capture_callable itself."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from hlo_doctor.capture import capture_callable
from hlo_doctor.cli import main
from hlo_doctor.core.errors import InputError
from hlo_doctor.opstats import load_opstats

SERVE = Path(__file__).parents[1] / "profile_programs" / "serve.py"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def server() -> Iterator[int]:
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, str(SERVE), str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and "ready" not in line:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                pytest.fail("the serving process exited before it was ready")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_attach_to_a_running_server(server: int, tmp_path: Path) -> None:
    out = tmp_path / "attached"
    result = CliRunner().invoke(main, ["profile", "--attach", f"127.0.0.1:{server}", "--duration-ms", "800",
                                       "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # The server marks no steps: they come from the executions of its decode program.
    assert doc["step_source"] == "module-executions" and doc["num_steps"] >= 3
    modules = {r["module"] for r in doc["rows"]}
    assert "jit_decode" in modules
    assert any(r["category"] == "matmul" for r in doc["rows"] if r["module"] == "jit_decode")
    run = json.loads((out / "run.json").read_text())
    assert run["target"] == f"attach:127.0.0.1:{server}" and run["backend"] == "cpu"
    assert list(out.glob("plugins/profile/*/*.xplane.pb"))


def test_attach_to_nothing_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "attached"
    result = CliRunner().invoke(main, ["profile", "--attach", f"127.0.0.1:{_free_port()}", "--duration-ms",
                                       "200", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error:")
    assert not out.exists()
    bad = CliRunner().invoke(main, ["profile", "--attach", "nohost", "--out", str(out)])
    assert bad.exit_code == 2 and "HOST:PORT" in bad.stderr


def test_capture_callable_with_warmup_fn_and_progress(tmp_path: Path) -> None:
    calls: list[str] = []
    seen: list[tuple[str, int, int]] = []
    x = jnp.arange(256, dtype=jnp.float32).reshape(16, 16)
    step = jax.jit(lambda a: a.T @ a)

    def warmup() -> None:
        calls.append("warmup")

    def step_fn() -> jax.Array:
        calls.append("step")
        return step(x)

    path = capture_callable(step_fn, steps=3, warmup=2, out_dir=tmp_path / "run", target="inline",
                            config={"batch": 16}, warmup_fn=warmup,
                            progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert calls == ["warmup"] + ["step"] * 5
    assert ("warmup", 2, 2) in seen and ("capture", 3, 3) in seen
    stats = load_opstats(path)
    assert stats.run is not None and dict(stats.run.config) == {"batch": 16}
    assert stats.num_steps == 3 and stats.table["category"].eq("matmul").any()
    # A failing step leaves nothing behind, and the previous run at that path survives.
    with pytest.raises(InputError, match="ZeroDivisionError"):
        capture_callable(lambda: 1 / 0, steps=1, warmup=0, out_dir=path, target="broken")
    assert load_opstats(path).num_steps == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_resolve_target_by_module_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from hlo_doctor.capture import resolve_target

    monkeypatch.syspath_prepend(str(SERVE.parent))
    step = resolve_target("sampler_step:step")
    tokens, logits = step()
    assert tokens.shape == (32,) and logits.dtype == jnp.float32
    with pytest.raises(InputError, match="raised RuntimeError on import"):
        resolve_target("import_error:step")


def test_gpu_command_buffers_are_turned_off_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from hlo_doctor.capture import keep_gpu_ops_visible

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    assert keep_gpu_ops_visible()
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_gpu_enable_command_buffer="
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_command_buffer=FUSION")
    assert not keep_gpu_ops_visible()
    assert os.environ["XLA_FLAGS"] == "--xla_gpu_enable_command_buffer=FUSION"
