"""Gate logic on op-stats tables built from the column spec: matching, policy, noise, verdicts, reports.

Real captures of JAX programs are in test_gate_captures.py; here the tables are written out by hand so
each rule of the gate is pinned down exactly.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hlo_doctor.core.errors import ExitCode, InputError
from hlo_doctor.gate import (
    GatePolicy,
    PolicyError,
    Verdict,
    find_policy_file,
    gate,
    load_policy,
    resolve_policy,
)
from hlo_doctor.opstats import COLUMN_NAMES, PER_STEP_COLUMNS, OpStats
from hlo_doctor.render.gate import to_json as render_json
from hlo_doctor.render.gate import to_junit as render_junit
from hlo_doctor.render.gate import to_markdown as render_markdown
from hlo_doctor.render.gate import to_text as render_text

STEPS = 30


def _op(module: str, op: str, opcode: str, category: str, shape: str, us: float, *,
        operand: str | None = None, program_id: int = 1) -> dict[str, object]:
    dims = re.sub(r"\{[^{}]*\}", "", shape)
    m = re.match(r"(\w+)\[([\d,]*)\]", shape)
    nbytes = 0
    if m:
        width = {"f32": 4, "bf16": 2, "s32": 4, "f16": 2}.get(m.group(1), 4)
        nbytes = width * math.prod(int(d) for d in m.group(2).split(",") if d)
    return {
        "rank": 0, "module": module, "program_id": program_id, "op": op, "opcode": opcode, "category": category,
        "shape": shape, "operand_shapes": operand if operand is not None else shape, "occurrences": STEPS,
        "total_time_us": us * STEPS, "avg_time_us": us, "time_per_step_us": us, "pct_of_step": 0.0,
        "bytes_read": nbytes, "bytes_written": nbytes, "bytes_accessed": 2 * nbytes, "op_name": "", "source": "",
        "canonical_key": f"{module}|{opcode}|{dims}", "self_time_us": us * STEPS, "devices": 1,
    }


def _stats(rows: list[dict[str, object]], *, step_us: float, seed: int, spread: float = 0.03,
           backend: str = "cpu", device_kind: str = "cpu", samples: bool = True,
           scale: dict[str, float] | None = None) -> OpStats:
    """An OpStats whose per-step samples are lognormal around each op's time (x ``scale[key]``)."""
    rng = np.random.default_rng(seed)
    scale = scale or {}
    table = pd.DataFrame(rows).reindex(columns=list(COLUMN_NAMES))
    table["runs_per_step"] = table["runs_per_step"].fillna(1.0)  # exports are checked: no NaN counts
    table["time_per_step_us"] = [
        float(r["time_per_step_us"]) * scale.get(str(r["canonical_key"]), 1.0) for r in rows  # type: ignore[arg-type]
    ]
    per_step_rows = []
    if samples:
        for r, us in zip(rows, table["time_per_step_us"], strict=True):
            for step, t in enumerate(rng.lognormal(math.log(us), spread, STEPS)):
                per_step_rows.append((step, r["module"], r["program_id"], r["op"], r["canonical_key"], float(t)))
    step_factor = 1.0 + sum(
        float(r["time_per_step_us"]) * (scale.get(str(r["canonical_key"]), 1.0) - 1.0)  # type: ignore[arg-type]
        for r in rows
    ) / step_us
    step_times = tuple(float(t) for t in rng.lognormal(math.log(step_us * step_factor), spread, STEPS))
    return OpStats(
        table_data=table, step_time_us=float(np.mean(step_times)), step_times_us=step_times if samples else (),
        num_steps=STEPS, step_source="annotation", per_step_data=pd.DataFrame(per_step_rows, columns=list(PER_STEP_COLUMNS)),
        modules=(), compile_events=(), backend=backend, run=None, source_path="", device_kind=device_kind,
    )


# A decode step shaped like the reference engine's at batch 64, vocab 256000.
FIXED = [
    _op("jit_decode", "dot_fusion", "fusion", "matmul", "bf16[64,256000]{1,0}", 9000.0, operand="bf16[64,2048]{1,0}"),
    _op("jit_decode", "add_fusion", "fusion", "elementwise", "bf16[64,2048]{1,0}", 400.0),
    _op("jit_sample", "iota_reduce_fusion", "fusion", "reduce", "(f32[64]{0}, s32[64]{0})", 2500.0,
        operand="bf16[64,256000]{1,0}"),
    _op("jit_sample", "wrapped_convert", "fusion", "convert", "f32[64,256000]{1,0}", 1200.0,
        operand="bf16[64,256000]{1,0}"),
    _op("jit_sample", "tiny_fusion", "fusion", "elementwise", "s32[64]{0}", 3.0),
]
ORIGINAL = [
    *FIXED[:3],
    _op("jit_sample", "copy.2", "copy", "copy", "f32[64,256000]{1,0}", 1560.0),
    _op("jit_convert_element_type", "wrapped_convert", "fusion", "convert", "f32[64,256000]{1,0}", 1230.0,
        operand="bf16[64,256000]{1,0}", program_id=7),
    FIXED[4],
]


def test_reappearing_copy_and_convert_fail_with_their_time_per_step() -> None:
    base = _stats(FIXED, step_us=14000.0, seed=1)
    cand = _stats(ORIGINAL, step_us=15600.0, seed=2)
    r = gate(base, cand, GatePolicy(), baseline_label="fixed", candidate_label="original")
    assert r.verdict is Verdict.REGRESSION and r.exit_code == ExitCode.FINDINGS
    new_ops = {v.key: v for v in r.violations if v.rule == "new-op"}
    assert set(new_ops) == {"jit_sample|copy|f32[64,256000]", "jit_convert_element_type|fusion|f32[64,256000]"}
    copy = new_ops["jit_sample|copy|f32[64,256000]"]
    assert "aliasing copy copy.2 f32[64,256000]{1,0} in jit_sample: 1,560.0 us/step" in copy.message
    assert "standalone convert wrapped_convert" in new_ops["jit_convert_element_type|fusion|f32[64,256000]"].message
    # The in-graph convert of the fixed step is gone in the original: reported, not failed.
    gone = [d for d in r.ops if d.status == "vanished"]
    assert [d.key for d in gone] == ["jit_sample|fusion|f32[64,256000]"]
    assert r.count("new") == 2 and r.count("matched") == 4
    # The step got ~11% slower too, beyond the 5% limit, significantly.
    assert any(v.rule == "step-time" for v in r.violations)
    assert r.violations[0].rule == "new-op" and r.violations[0].key == "jit_sample|copy|f32[64,256000]"


def test_same_program_passes_and_swapping_reports_improvement() -> None:
    a1, a2 = _stats(FIXED, step_us=14000.0, seed=3), _stats(FIXED, step_us=14000.0, seed=4)
    r = gate(a1, a2)
    assert r.verdict is Verdict.PASS and r.exit_code == ExitCode.OK and not r.violations
    assert r.count("new") == r.count("vanished") == 0
    assert r.step is not None and r.step_judgement == "no change"
    # Fixed as the candidate: the copy and the convert vanish, the step gets faster.
    r2 = gate(_stats(ORIGINAL, step_us=15600.0, seed=5), a2)
    assert r2.verdict is Verdict.PASS and r2.step_judgement == "improved"
    assert {d.key for d in r2.ops if d.status == "vanished"} >= {"jit_sample|copy|f32[64,256000]"}


def test_small_new_ops_and_other_opcodes_do_not_fail() -> None:
    cand_rows = [*FIXED, _op("jit_sample", "copy.3", "copy", "copy", "s32[64]{0}", 5.0),
                 _op("jit_decode", "transpose", "transpose", "data-movement", "bf16[2048,2048]{0,1}", 50.0)]
    r = gate(_stats(FIXED, step_us=14000.0, seed=6), _stats(cand_rows, step_us=14000.0, seed=7))
    assert r.verdict is Verdict.PASS
    assert {d.judgement for d in r.ops if d.status == "new"} == {"new"}
    # ...unless the policy names them, and the size threshold lets them through.
    policy = GatePolicy(fail_on_new=("transpose", "copy"), new_op_min_bytes=0)
    r2 = gate(_stats(FIXED, step_us=14000.0, seed=6), _stats(cand_rows, step_us=14000.0, seed=7), policy)
    assert {v.key for v in r2.violations} == {"jit_decode|transpose|bf16[2048,2048]", "jit_sample|copy|s32[64]"}


def test_layout_changing_copy_is_not_an_aliasing_copy() -> None:
    cand_rows = [*FIXED, _op("jit_decode", "copy.5", "copy", "copy", "bf16[64,256000]{0,1}", 900.0,
                             operand="bf16[64,256000]{1,0}")]
    r = gate(_stats(FIXED, step_us=14000.0, seed=8), _stats(cand_rows, step_us=14000.0, seed=9))
    assert not [v for v in r.violations if v.rule == "new-op"]


def test_op_regression_beyond_limit_fails_and_below_floor_is_not_judged() -> None:
    base = _stats(FIXED, step_us=14000.0, seed=10)
    slower = {"jit_sample|fusion|(f32[64], s32[64])": 1.6, "jit_sample|fusion|s32[64]": 5.0}
    cand = _stats(FIXED, step_us=14000.0, seed=11, scale=slower)
    r = gate(base, cand, GatePolicy(max_step_regression_pct=50.0))
    (v,) = r.violations
    assert v.rule == "op-time" and v.key == "jit_sample|fusion|(f32[64], s32[64])"
    assert v.message.startswith("iota_reduce_fusion (f32[64]{0}, s32[64]{0}) in jit_sample: 2,500.0 -> 4,000.0 us/step")
    assert "median changed +6" in v.message and "beyond the minimum effect of 25%" in v.message
    tiny = next(d for d in r.ops if d.key == "jit_sample|fusion|s32[64]")
    assert tiny.judgement == "below floor" and tiny.comparison is None
    # A limit above the change passes.
    assert gate(base, cand, GatePolicy(max_step_regression_pct=50.0, max_op_regression_pct=80.0)).verdict is Verdict.PASS


def test_busier_machine_is_divided_out_but_one_slower_op_is_not() -> None:
    base = _stats(FIXED, step_us=14000.0, seed=20)
    everything = {str(r["canonical_key"]): 1.8 for r in FIXED}
    busy = _stats(FIXED, step_us=14000.0, seed=21, scale=everything)
    r = gate(base, busy)
    assert r.verdict is Verdict.PASS and r.speed_factor == pytest.approx(1.8, rel=0.05) and r.speed_ops == 4
    assert any(re.match(r"machine speed: the 4 ops in common ran x1\.[78]\d\d", n) for n in r.notes), r.notes
    # Without the normalization, the same captures fail on step time and every op.
    raw = gate(base, busy, GatePolicy(normalize_speed=False))
    assert raw.verdict is Verdict.REGRESSION and raw.speed_factor == 1.0
    assert {v.rule for v in raw.violations} == {"step-time", "op-time"}
    # On the busy machine, the argmax got 60% slower than everything else: still caught.
    slower = {**everything, "jit_sample|fusion|(f32[64], s32[64])": 1.8 * 1.6}
    r2 = gate(base, _stats(FIXED, step_us=14000.0, seed=22, scale=slower), GatePolicy(max_step_regression_pct=50))
    assert [v.key for v in r2.violations] == ["jit_sample|fusion|(f32[64], s32[64])"]


def test_ops_disagreeing_between_captures_demote_a_timing_regression() -> None:
    # Ten ops whose ratios scatter by +-40% from one capture to the next (as on a loaded machine):
    # a +60% op that the per-step test calls significant is within that noise.
    rows = [_op("jit_decode", f"f.{i}", "fusion", "elementwise", f"f32[64,{1000 + i}]{{1,0}}", 1000.0) for i in range(10)]
    rng = np.random.default_rng(30)
    scatter = {str(r["canonical_key"]): float(rng.lognormal(0.0, 0.4)) for r in rows}
    scatter[str(rows[0]["canonical_key"])] = 1.6
    base = _stats(rows, step_us=11000.0, seed=31, spread=0.02)
    cand = _stats(rows, step_us=11000.0, seed=32, spread=0.02, scale=scatter)
    r = gate(base, cand, GatePolicy(max_step_regression_pct=100, normalize_speed=False))
    op = next(d for d in r.ops if d.key == rows[0]["canonical_key"])
    assert r.verdict is Verdict.PASS and op.judgement == "within noise"
    assert op.comparison is not None and "within the noise between the two captures" in op.comparison.reason
    assert r.capture_noise > 0.2 and any("disagree by" in n for n in r.notes)
    # Without the capture-noise check, the same +60% fails.
    raw = gate(base, cand, GatePolicy(max_step_regression_pct=100, normalize_speed=False, noise_z=0.0))
    assert rows[0]["canonical_key"] in {v.key for v in raw.violations}


def test_slowdown_of_the_op_holding_most_time_reads_as_machine_speed() -> None:
    # A known limit of normalize_speed: the op with most of the time sets the speed factor.
    base = _stats(FIXED, step_us=14000.0, seed=33)
    cand = _stats(FIXED, step_us=14000.0, seed=34, scale={"jit_decode|fusion|bf16[64,256000]": 1.5})
    assert gate(base, cand).verdict is Verdict.PASS
    off = gate(base, cand, GatePolicy(normalize_speed=False))
    assert off.verdict is Verdict.REGRESSION and {v.rule for v in off.violations} == {"step-time", "op-time"}


def test_too_few_ops_for_a_speed_factor_compares_as_captured() -> None:
    rows = FIXED[:2]
    r = gate(_stats(rows, step_us=9400.0, seed=23), _stats(rows, step_us=9400.0, seed=24))
    assert r.speed_factor == 1.0 and r.speed_ops == 0 and r.capture_noise == 0.0
    assert any("need 3" in n for n in r.notes) and any("need 5" in n for n in r.notes)


def test_noisy_change_is_within_noise_and_inconclusive_under_strict() -> None:
    base = _stats(FIXED, step_us=14000.0, seed=12, spread=0.4)
    cand = _stats(FIXED, step_us=14000.0, seed=13, spread=0.4, scale={"jit_decode|fusion|bf16[64,256000]": 1.1})
    # As captured (a quiet machine's policy): the per-step test alone cannot decide.
    quiet = GatePolicy(normalize_speed=False, noise_z=0.0)
    r = gate(base, cand, quiet)
    assert r.verdict is Verdict.PASS and "step" in r.within_noise and r.step_judgement == "within noise"
    strict = gate(base, cand, quiet, strict=True)
    assert strict.verdict is Verdict.INCONCLUSIVE and strict.exit_code == ExitCode.FINDINGS
    assert strict.step_judgement == "inconclusive"


def test_without_samples_point_estimates_decide_and_say_so() -> None:
    base = _stats(FIXED, step_us=14000.0, seed=14, samples=False)
    cand = _stats(FIXED, step_us=14000.0, seed=15, samples=False, scale={"jit_sample|fusion|(f32[64], s32[64])": 1.5})
    r = gate(base, cand)
    assert r.verdict is Verdict.REGRESSION
    assert {v.rule for v in r.violations} == {"op-time", "step-time"}
    assert any("judged on the mean alone" in n for n in r.notes)
    assert r.step is not None and not r.step.tested


def test_ignore_patterns_leave_ops_out() -> None:
    base = _stats(FIXED, step_us=14000.0, seed=16)
    cand = _stats(ORIGINAL, step_us=14000.0, seed=17)
    r = gate(base, cand, GatePolicy(ignore=("jit_convert_element_type|*", "*|copy|*"), max_step_regression_pct=50))
    assert r.verdict is Verdict.PASS
    assert {d.judgement for d in r.ops if d.status == "new"} == {"ignored"}


def test_different_backends_refused() -> None:
    with pytest.raises(InputError, match=r"different backends \(cpu vs tpu\)"):
        gate(_stats(FIXED, step_us=1.0, seed=1), _stats(FIXED, step_us=1.0, seed=2, backend="tpu", device_kind=""))
    with pytest.raises(InputError, match="different devices"):
        gate(_stats(FIXED, step_us=1.0, seed=1, device_kind="TPU v5 lite"),
             _stats(FIXED, step_us=1.0, seed=2, device_kind="TPU v6 lite"))


def test_no_common_module_or_too_little_matched_time_refused() -> None:
    other = [_op("jit_other", "dot", "dot", "matmul", "f32[8,8]{1,0}", 10.0)]
    with pytest.raises(InputError, match="no HLO module in common.*jit_decode, jit_sample.*jit_other"):
        gate(_stats(FIXED, step_us=1.0, seed=1), _stats(other, step_us=1.0, seed=2))
    # Same module names, different shapes (another batch size): nothing matches.
    b128 = [_op("jit_decode", "dot_fusion", "fusion", "matmul", "bf16[128,256000]{1,0}", 18000.0),
            _op("jit_sample", "tiny_fusion", "fusion", "elementwise", "s32[64]{0}", 3.0)]
    with pytest.raises(InputError, match="share only 0% of the baseline's op time"):
        gate(_stats(FIXED, step_us=1.0, seed=1), _stats(b128, step_us=1.0, seed=2))


def test_rows_sharing_a_key_are_summed() -> None:
    doubled = [*FIXED, {**FIXED[1], "op": "add_fusion.1", "program_id": 2}]
    r = gate(_stats(FIXED, step_us=14000.0, seed=18), _stats(doubled, step_us=14000.0, seed=19))
    add = next(d for d in r.ops if d.key == "jit_decode|fusion|bf16[64,2048]")
    assert add.candidate_us == pytest.approx(800.0) and add.ops == "add_fusion, add_fusion.1"


def test_missing_columns_are_an_input_error() -> None:
    s = _stats(FIXED, step_us=1.0, seed=1)
    broken = OpStats(table_data=s.table.drop(columns=["canonical_key"]), step_time_us=1.0, step_times_us=(),
                     num_steps=1, step_source="", per_step_data=s.per_step, modules=(), compile_events=(),
                     backend="cpu", run=None, source_path="")
    with pytest.raises(InputError, match="lacks column.*canonical_key"):
        gate(s, broken, candidate_label="cand.json")


# ----------------------------------------------------------------------------------------- reports

@pytest.fixture(scope="module")
def failing_result():
    return gate(_stats(FIXED, step_us=14000.0, seed=1), _stats(ORIGINAL, step_us=15600.0, seed=2),
                baseline_label="baseline/", candidate_label="candidate/")


def test_json_verdict(failing_result) -> None:
    doc = json.loads(render_json(failing_result))
    assert doc["schema"] == "hlo-doctor.gate/1" and doc["verdict"] == "regression" and doc["exit_code"] == 1
    assert doc["summary"]["new"] == 2 and doc["summary"]["violations"] == len(failing_result.violations)
    assert doc["violations"][0]["rule"] == "new-op"
    assert doc["step"]["comparison"]["outcome"] == "regressed"
    assert doc["policy"]["fail_on_new"] == ["aliasing-copy", "standalone-convert"]
    copy = next(o for o in doc["ops"] if o["key"] == "jit_sample|copy|f32[64,256000]")
    assert copy["status"] == "new" and copy["baseline_us"] is None and copy["candidate_us"] == pytest.approx(1560.0)


def test_markdown_summary(failing_result) -> None:
    md = render_markdown(failing_result)
    assert md.startswith("### hlo-doctor gate: :x: FAIL: 3 regressions")
    assert "| `new-op` | new aliasing copy copy.2 f32[64,256000]{1,0} in jit_sample: 1,560.0 us/step" in md
    assert "**New ops**" in md and "**Vanished ops**" in md and "<details><summary>Policy</summary>" in md
    # Canonical keys contain '|': escaped inside table cells.
    assert "\\|" not in md or "jit_sample\\|" in md


def test_markdown_caps_the_violations_it_lists(failing_result) -> None:
    md = render_markdown(failing_result, max_violations=1)
    assert md.count("| `new-op` |") == 1 and "| ... | 2 more in the JSON verdict | |" in md


def test_junit_xml(failing_result) -> None:
    root = ET.fromstring(render_junit(failing_result))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("failures") == "3"
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {"step time", "new op: jit_sample|copy|f32[64,256000]",
                      "new op: jit_convert_element_type|fusion|f32[64,256000]"}


def test_junit_times_timestamp_and_file(failing_result, tmp_path: Path) -> None:
    """CI report views need when it ran, a time per case (the op's time per step) and the source file."""
    from dataclasses import replace
    from datetime import UTC, datetime

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "sampling.py").write_text("")
    ops = tuple(replace(d, source="/capture/site-packages/pkg/sampling.py:105") if d.opcode == "copy" else d
                for d in failing_result.ops)
    result = replace(failing_result, ops=ops)
    xml = render_junit(result, timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), source_root=tmp_path)
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None and suite.get("timestamp") == "2026-01-02T03:04:05+00:00"
    assert float(suite.get("time", "0")) == pytest.approx(result.candidate.step_time_us / 1e6, abs=1e-6)
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    copy = cases["new op: jit_sample|copy|f32[64,256000]"]
    assert copy.get("file") == "pkg/sampling.py"
    assert float(copy.get("time", "0")) == pytest.approx(1560.0 / 1e6, rel=1e-3)
    assert all(float(c.get("time", "0")) > 0 for c in cases.values())


def test_text_report_never_cuts_a_name_unless_asked(failing_result) -> None:
    from dataclasses import replace

    long = "jit_a_module_name_longer_than_any_terminal_column"
    result = replace(failing_result, ops=(replace(failing_result.ops[0], module=long), *failing_result.ops[1:]))
    assert long in render_text(result)  # a log or a file: the whole name
    assert long not in render_text(result, fit=True) and long[:26] in render_text(result, fit=True)


def test_text_report(failing_result) -> None:
    text = render_text(failing_result)
    assert text.splitlines()[0] == "hlo-doctor gate: FAIL: 3 regressions"
    assert "FAIL [new-op] new aliasing copy copy.2" in text


# ------------------------------------------------------------------------------------------ policy

def test_policy_file_in_all_three_places(tmp_path: Path) -> None:
    for i, text in enumerate([
        "max_step_regression_pct = 3\n",
        "[gate]\nmax_step_regression_pct = 3\n",
        "[tool.hlo-doctor.gate]\nmax_step_regression_pct = 3\n",
    ]):
        f = tmp_path / f"p{i}.toml"
        f.write_text(text)
        p = load_policy(f)
        assert p.max_step_regression_pct == 3.0 and p.source == str(f)
    f = tmp_path / "full.toml"
    f.write_text('fail_on_new = ["copy"]\nignore = ["jit_warmup|*"]\nnew_op_min_bytes = 0\nalpha = 0.01\n')
    p = load_policy(f)
    assert (p.fail_on_new, p.ignore, p.new_op_min_bytes, p.alpha) == (("copy",), ("jit_warmup|*",), 0, 0.01)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_step_regresion_pct = 3\n", r"unknown key 'max_step_regresion_pct'.*did you mean 'max_step_regression_pct'"),
        ('[gate]\nalpha = "high"\n', r"\[gate\]: key 'alpha' must be a number between 0 and 1, got 'high'"),
        ("op_floor_us = -1\n", r"key 'op_floor_us' must be a number >= 0"),
        ("fail_on_new = 'copy'\n", r"key 'fail_on_new' must be a list of opcode names"),
        ("new_op_min_bytes = 1.5\n", r"key 'new_op_min_bytes' must be an integer"),
        ("max_step_regression_pct = \n", r"invalid TOML"),
    ],
)
def test_invalid_policy_names_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "policy.toml"
    f.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(f)
    assert re.search(message, info.value.one_line()), info.value.one_line()
    assert info.value.what.startswith(str(f)) and info.value.exit_code == ExitCode.USAGE


def test_pyproject_found_from_cwd_upward_and_flags_override(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n[tool.hlo-doctor.gate]\nop_floor_us = 100\n")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_policy_file(deep) == tmp_path / "pyproject.toml"
    p = resolve_policy(None, {"max_op_regression_pct": 10.0, "ignore": ()}, cwd=deep)
    assert (p.op_floor_us, p.max_op_regression_pct) == (100.0, 10.0)
    assert p.source.endswith("pyproject.toml + flags (--max-op-regression-pct)")
    with pytest.raises(PolicyError, match="option --alpha: key 'alpha'"):
        resolve_policy(None, {"alpha": 2.0}, cwd=deep)
    # A pyproject.toml without the table does not stop the search; the repository root does.
    (deep / "pyproject.toml").write_text("[project]\nname='y'\n")
    assert find_policy_file(deep) == tmp_path / "pyproject.toml"
    outside = tmp_path / "a" / "b" / "c"
    (outside / ".git").mkdir(parents=True)
    assert find_policy_file(outside) is None
    assert resolve_policy(None, {}, cwd=outside) == GatePolicy()
    # An explicit pyproject.toml without the table is an error, not a silent default.
    with pytest.raises(PolicyError, match=r"no \[tool.hlo-doctor.gate\] table"):
        load_policy(deep / "pyproject.toml")


def test_cli_strict_turns_within_noise_into_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from hlo_doctor.cli import main
    from hlo_doctor.opstats import to_json

    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    base = _stats(FIXED, step_us=14000.0, seed=12, spread=0.4)
    cand = _stats(FIXED, step_us=14000.0, seed=13, spread=0.4, scale={"jit_decode|fusion|bf16[64,256000]": 1.1})
    (tmp_path / "base.json").write_text(to_json(base))
    (tmp_path / "cand.json").write_text(to_json(cand))
    args = ["gate", "base.json", "cand.json", "--no-normalize-speed"]
    relaxed = CliRunner().invoke(main, args)
    assert relaxed.exit_code == 0 and "PASS: no regression" in relaxed.stderr and "within noise" in relaxed.stderr
    strict = CliRunner().invoke(main, [*args, "--strict", "--junit", "junit.xml"])
    assert strict.exit_code == 1 and "INCONCLUSIVE (strict)" in strict.stderr
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert "step time" in failed
