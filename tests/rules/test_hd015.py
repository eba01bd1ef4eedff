"""HD015 step.host-bound on real captures: the H200 decode step (host-bound), a small XLA:CPU program
with Python between two jitted calls (profiled here), and the reference engine on XLA:CPU
(device-bound: no finding)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.lint import context_from_example, load_context, load_rulebook, run_rule
from hlo_doctor.lint.rule import Example

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
PROGRAMS = Path(__file__).parent / "programs"
RULE = load_rulebook().get("HD015")


def _findings(path: Path) -> list[Any]:
    assert RULE is not None
    return run_rule(RULE, load_context(path))


def _def_line(program: str, function: str) -> int:
    lines = (PROGRAMS / program).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(f"def {function}("))


def test_h200_decode_step_names_the_runner_lines() -> None:
    found = _findings(SAMPLES / "gpu_h200_original")
    assert [f.source.rsplit("/", 1)[-1] for f in found] == ["runner.py:124", "runner.py:135"]
    decode, sample = found
    # execute_decode: the dispatch of jit_decode_forward and a device_put of the position, per step.
    assert decode.time_per_step_us == pytest.approx(1316, abs=20)
    assert "jit_decode_forward" in decode.message and "device_put" in decode.message
    assert decode.recoverable_us == pytest.approx(445, abs=10)  # its Python, not the dispatch
    # _sample_from_logits: the eager astype's Python and the dispatch of its own program.
    assert "_astype" in sample.message and "jit_convert_element_type" in sample.message
    assert dict(decode.extra)["device_idle_pct"] == pytest.approx(90.6, abs=0.5)
    assert decode.stack == ((decode.source.rsplit(":", 1)[0], 124, "execute_decode"),)


def test_device_bound_engine_on_xla_cpu_has_no_finding() -> None:
    assert _findings(SAMPLES / "engine_b64_original_a") == []


def _profile(target: str, out: Path) -> None:
    result = CliRunner().invoke(main, ["profile", f"{PROGRAMS / target}", "--steps", "3", "--warmup", "1",
                                       "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_python_between_two_jitted_calls_on_xla_cpu(tmp_path: Path) -> None:
    _profile("host_bound_step.py:step", tmp_path / "run")
    result = CliRunner().invoke(main, ["diagnose", str(tmp_path / "run"), "--format", "json", "--select", "HD015",
                                                       "--no-what-if"],
                                catch_exceptions=False)
    doc = json.loads(result.stdout)
    found = doc["findings"]
    assert found, doc
    top = found[0]
    line = _def_line("host_bound_step.py", "score_rows")
    assert top["source"].endswith(f"host_bound_step.py:{line}")
    assert top["message"].startswith(f"host_bound_step.py:{line} score_rows keeps the device waiting")
    # The Python loop fills most of the step, and all of it can leave the step.
    assert top["pct_of_step"] > 30.0
    assert top["recoverable_us"] == pytest.approx(top["time_per_step_us"], rel=0.01)
    assert top["extra"]["device_idle_pct"] > 80.0


def _example(idle_python_us: float, wall_us: float = 1000.0) -> Example:
    step = {"host": "vm", "device": "/device:GPU:0", "step": 0, "start_us": 0.0, "wall_us": wall_us,
            "busy_us": wall_us - idle_python_us, "op_us": wall_us - idle_python_us,
            "host_us": {"python": wall_us}, "idle_by_kind": {"python": idle_python_us}}
    line = {"kind": "python", "where": "loop.py:3 step", "target": "", "path": "loop.py",
            "idle_us": idle_python_us, "host_us": wall_us}
    return Example(breakdown={"step_source": "annotation", "steps": [step], "lines": [line]})


def test_threshold_is_a_share_of_the_step() -> None:
    assert RULE is not None
    assert run_rule(RULE, context_from_example(_example(499.0))) == []
    (finding,) = run_rule(RULE, context_from_example(_example(501.0)))
    assert finding.source == "loop.py:3" and finding.time_per_step_us == pytest.approx(501.0)
