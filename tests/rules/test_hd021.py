"""HD021 on a real decode step that returns log-probabilities in its state that no later call reads.

``programs/dead_output.py`` holds the step (the state donated and fed back; jit drops the unread
argument) and the same step without the log-probabilities; both give the same tokens. Profiled and
diagnosed on XLA:CPU through the CLI.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from profiled_rules import line_of, profile_and_diagnose

from hlo_doctor.hlo.dead_outputs import state_outputs
from hlo_doctor.lint import load_context
from hlo_doctor.lint.op_union import overlap_ratio

PROGRAM = Path(__file__).parent / "programs" / "dead_output.py"


def _profile_and_diagnose(target: str, out: Path) -> dict:  # type: ignore[type-arg]
    return profile_and_diagnose(PROGRAM, target, out)


def _line(text: str) -> int:
    return line_of(PROGRAM, text)


def test_hd021_the_unread_output_sized_by_the_ops_feeding_only_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    doc = _profile_and_diagnose("step", run)
    [found] = [f for f in doc["findings"] if f["code"] == "HD021"]
    assert found["module"] == "jit__decode" and found["shape"].startswith("f32[48,32000]")
    assert found["source"].endswith(f"dead_output.py:{_line('jax.nn.log_softmax')}")

    ctx = load_context(run)
    module = next(m for m in ctx.modules if m.name == "jit__decode")
    [out] = state_outputs(module)
    assert found["extra"]["output_index"] == out.index and found["op"] == out.producer.name
    feeding = {op.name for op in out.only_feeds}
    assert set(found["extra"]["ops"]) == feeding and out.producer.name in feeding
    # The matmul and the max the argmax shares stay: not counted.
    shared = {u.name for op in out.only_feeds for u in module.operands_of(op)} - feeding
    assert shared and all(ctx.op_timing(module, n) is None or n not in feeding for n in shared)
    times = [t.time_per_step_us for name in found["extra"]["timed_ops"] if (t := ctx.op_timing(module, name))]
    ratio = overlap_ratio(ctx, module.name, found["extra"]["timed_ops"])
    assert ratio is not None
    assert found["recoverable_us"] == pytest.approx(sum(times) * ratio, rel=1e-3)


def test_hd021_silent_without_the_output(tmp_path: Path) -> None:
    doc = _profile_and_diagnose("step_without_logits", tmp_path / "run")
    assert not [f for f in doc["findings"] if f["code"] == "HD021"]
