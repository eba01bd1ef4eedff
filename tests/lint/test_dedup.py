"""One finding per cause: a program recompiled under several ids gives one finding per op, not one per copy.

The capture is real: a decode loop over a KV cache that is not donated, jitted afresh on every call
(``tests/trace/programs/compile_steps.py``), so XLA:CPU compiles the same program under a new
program id in each traced step and HD009 flags the same four copies in each.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hlo_doctor.capture import capture_run, resolve_target
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.lint import diagnose, load_context, load_rulebook, run_rule, total_recoverable
from hlo_doctor.lint.runner import merge_recompiled

PROGRAMS = Path(__file__).parents[1] / "trace" / "programs" / "compile_steps.py"
BOOK = load_rulebook()


@pytest.fixture(scope="module")
def recompiled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    step = resolve_target(f"{PROGRAMS}:fresh_jit_decode")
    run, _ = capture_run(step, steps=3, warmup=1, out_dir=tmp_path_factory.mktemp("dedup") / "run",
                         target="fresh_jit_decode")
    return run


def test_recompiled_copies_give_one_finding_each(recompiled_run: Path) -> None:
    ctx = load_context(recompiled_run)
    rule = BOOK.get("HD009")
    assert rule is not None
    per_copy = run_rule(rule, ctx)
    ids = {f.program_id for f in per_copy}
    # The rule alone: the same four copies in each of the three programs.
    assert len(ids) == 3 and len(per_copy) == 12
    assert Counter(f.op for f in per_copy) == Counter({op: 3 for op in {f.op for f in per_copy}})

    found = [f for f in diagnose(ctx, BOOK).findings if f.code == "HD009"]
    # One cause: the four copies come from one line (the state is not donated), in three programs.
    assert len(found) == 1
    f = found[0]
    extra = dict(f.extra)
    assert extra["programs"] == 3 and sorted(extra["program_ids"]) == sorted(ids)
    assert extra["same_line_ops"] == 4 and set(extra["ops"]) == {c.op for c in per_copy}
    # The copies run in different steps: the cause costs their sum per step.
    assert f.time_per_step_us == pytest.approx(sum(c.time_per_step_us or 0.0 for c in per_copy))
    assert f.recoverable_us == pytest.approx(sum(c.recoverable_us or 0.0 for c in per_copy))
    assert "the same op in 3 programs of jit__lambda" in f.message


def _finding(code: str, op: str, pid: int | None, us: float, evidence: tuple[str, ...] = ("%copy = copy(%p)",),
             module: str = "jit_step") -> Finding:
    return Finding(code=code, name="x", severity=Severity.MEDIUM, message=f"{op} is waste", module=module, op=op,
                   program_id=pid, time_per_step_us=us, pct_of_step=us / 10, recoverable_us=us, evidence=evidence)


def test_what_is_merged_and_what_is_not() -> None:
    with_meta = ('%copy = f32[8]{0} copy(%p), metadata={op_name="jit(step)/copy" stack_frame_id=3}',)
    other_meta = ('%copy = f32[8]{0} copy(%p), metadata={op_name="jit(step)/copy" stack_frame_id=9}',)
    findings = [
        _finding("HD009", "copy", 1, 10.0, with_meta),
        _finding("HD009", "copy", 2, 12.0, other_meta),  # a recompiled copy: merged
        _finding("HD009", "copy", 2, 12.0, other_meta),  # the same op of the same program again: once
        _finding("HD009", "copy", 3, 5.0, ("%copy = f32[16]{0} copy(%p)",)),  # another shape: another cause
        _finding("HD002", "copy", 1, 10.0, with_meta),  # another rule
        _finding("HD009", "copy", 4, 1.0, with_meta, module="jit_other"),  # another module
        Finding(code="HD000", name="internal", severity=Severity.ERROR, message="crash"),
        Finding(code="HD000", name="internal", severity=Severity.ERROR, message="crash"),
    ]
    merged = merge_recompiled(findings)
    assert [(f.code, f.module, f.program_id) for f in merged] == [
        ("HD009", "jit_step", 1), ("HD009", "jit_step", 3), ("HD002", "jit_step", 1), ("HD009", "jit_other", 4),
        ("HD000", "", None), ("HD000", "", None)]
    first = merged[0]
    assert first.time_per_step_us == 22.0 and first.recoverable_us == 22.0 and first.pct_of_step == pytest.approx(2.2)
    assert dict(first.extra) == {"programs": 2, "program_ids": (1, 2)}
    assert merged[1].extra == ()
    # Two rules on the same op for one cause: the summary counts the op once, with the larger estimate.
    assert total_recoverable([first, merged[2]]) == 22.0
