"""hlo-doctor verify on the real reference engine (XLA:CPU), at small sizes.

The correct fix must pass checks 1-4; the two hand fixes of the seed report must fail on
steady-state compiles (with JAX's reason) and on the batch TTFT ratio. Check 5 (throughput) is
timing and is not asserted here at these sizes beyond being a valid outcome.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from seed_attempts import ATTEMPTS, build_attempt

from hlo_doctor.cli import main
from hlo_doctor.core.errors import InputError
from hlo_doctor.render.verify import to_json as render_json
from hlo_doctor.render.verify import to_markdown as render_markdown
from hlo_doctor.statistics import Outcome
from hlo_doctor.verify import (
    RoundResult,
    VariantSummary,
    VerifyReport,
    VerifySettings,
    check_ttft,
    engine_config,
    run_verify,
)
from hlo_doctor.verify.stats import alpha_at_look

ENGINE = Path(__file__).resolve().parents[2] / "hlo_doctor" / "engine"
SMALL = {"vocab": 1024, "batch": 8, "max_tokens": 6, "rounds": 5, "profile_steps": 2}


@pytest.fixture(scope="module")
def baseline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One capture of the unmodified engine at the small sizes, shared as every test's baseline trace."""
    from hlo_doctor.capture import capture_callable
    from hlo_doctor.engines import load_engine

    module = load_engine(None)
    config = engine_config(module, VerifySettings(fix="bf16-greedy-sampler", **SMALL))  # type: ignore[arg-type]
    target = module.profile_target(config)
    return capture_callable(target.step, steps=2, warmup=1, out_dir=tmp_path_factory.mktemp("base") / "run",
                            target="engine", warmup_fn=target.warmup)


@pytest.fixture(scope="module")
def fix_report(baseline_run: Path, tmp_path_factory: pytest.TempPathFactory) -> VerifyReport:
    # At these sizes the batch TTFT is 3-10 ms, so a scheduler hiccup on a busy 2-core machine is a large
    # fraction of it (a loaded CI run measured x1.54 at the fastest of 5 rounds: 5.1 vs 3.3 ms): the pass
    # test allows x2.5 (the hand fixes below fail at x5 and more with the default).
    # A budget too small for another pair: the verdict is looked at once (at alpha spent for look 1),
    # and no pair is added.
    settings = VerifySettings(fix="bf16-greedy-sampler", variant="full", baseline_run=baseline_run,
                              out_dir=tmp_path_factory.mktemp("verify-fix"), ttft_bound=2.5, budget_s=0.001,
                              **SMALL)  # type: ignore[arg-type]
    return run_verify(settings)


def test_fix_passes_the_safety_checks(fix_report: VerifyReport) -> None:
    checks = {c.number: c for c in fix_report.checks}
    assert [c.number for c in fix_report.checks] == [1, 2, 3, 4, 5]
    for n in (1, 2, 3, 4):
        assert checks[n].passed, checks[n]
    assert fix_report.treatment.compiles == 0 and fix_report.baseline.compiles == 0
    assert len(fix_report.baseline.rounds) == len(fix_report.treatment.rounds) == 5
    # Interleaved, alternating which variant goes first in each pair.
    order = sorted(fix_report.baseline.rounds + fix_report.treatment.rounds, key=lambda r: r.order)
    assert [r.variant for r in order[:4]] == ["baseline", "treatment", "treatment", "baseline"]
    assert "8x6 tokens identical in 5/5 rounds" in checks[3].figure
    assert "argmax reads jit_sample: bf16[8,1024]" in checks[4].figure
    assert fix_report.throughput is not None and fix_report.throughput.outcome in set(Outcome)
    assert fix_report.throughput.n_baseline == fix_report.throughput.n_candidate == 5
    # Check 5 decides on the decode steps, paired rounds: 5 pairs of 5 decode steps a side.
    step = fix_report.step_time
    assert step is not None and step.method == "paired rounds" and step.blocks == 5 and step.n_baseline == 25
    assert checks[5].name == "step-time verdict" and checks[5].figure.startswith(f"{step.outcome}: step x")
    assert fix_report.verdict == str(step.outcome) and fix_report.stopping is not None
    stop = fix_report.stopping
    assert stop.rounds == 5 and stop.looks == 1 and stop.budget_s == 0.001
    assert stop.reason == ("budget spent" if step.outcome is Outcome.INCONCLUSIVE else "decided")
    assert step.alpha == pytest.approx(alpha_at_look(0.05, 1))


def test_fix_removes_the_copy_and_the_convert_program(fix_report: VerifyReport) -> None:
    removed = {(o.code, o.module): o for o in fix_report.removed_ops}
    assert removed[("HD002", "jit_sample")].removed
    assert removed[("HD003", "jit_convert_element_type")].removed
    # The argmax still runs, now over bf16: narrowed, with its time in both traces.
    argmax = [o for o in fix_report.removed_ops if o.module == "jit_sample" and o.code in ("HD001", "HD004")]
    assert argmax and all(o.status == "narrowed" and o.treatment_time_per_step_us for o in argmax)
    assert all(o.status in ("gone", "narrowed") for o in fix_report.removed_ops)
    assert fix_report.removed_time_per_step_us is not None and fix_report.removed_time_per_step_us > 0
    assert "sampling.py" in fix_report.fix_diff and "compilation_manager.py" in fix_report.fix_diff


def test_reports_render(fix_report: VerifyReport) -> None:
    doc = json.loads(render_json(fix_report))
    assert next(iter(doc)) == "schema" and doc["schema"] == "hlo-doctor.verify/1"
    assert doc["passed"] == fix_report.passed
    assert [c["number"] for c in doc["checks"]] == [1, 2, 3, 4, 5]
    assert doc["treatment"]["rounds"][0]["compiles"] == 0
    assert doc["engine_config"]["vocab_size"] == 1024 and doc["engine_config"]["batch"] == 8
    md = render_markdown(fix_report)
    assert md.startswith("## hlo-doctor verify: ")
    assert "| 1 | steady-state compiles | pass |" in md
    assert "| throughput tok/s |" in md
    # The profiled step of verify's own captures beside the decode step it measured, both named.
    base_us, treat_us = fix_report.profiled_step_us
    assert base_us and treat_us
    assert doc["step"]["profiled_step_ms"]["treatment"] == pytest.approx(treat_us / 1e3)
    assert doc["step"]["decode_step_ms"]["baseline"] == pytest.approx(fix_report.step_time.baseline_median)
    assert "| profiled step ms |" in md and "| decode step ms |" in md
    assert doc["stopping"]["text"].startswith(("decided at round 5 (budget 0.001 s,", "budget spent at round 5 (budget 0.001 s,"))
    assert doc["step_time"]["method"] == "paired rounds"
    # The medians in the table and the verdict's paired ratio beside them, each labelled as what it is.
    st = fix_report.step_time
    decode = doc["step"]["decode_step_ms"]
    assert decode["ratio"] == st.ratio and decode["medians_ratio"] == pytest.approx(
        st.candidate_median / st.baseline_median)
    assert f"x{st.ratio:.3f} paired" in md
    assert (f"decode step ms: medians {st.baseline_median:,.1f} -> {st.candidate_median:,.1f} "
            f"(x{st.candidate_median / st.baseline_median:.3f}); verdict on the paired trimmed-mean ratio "
            f"x{st.ratio:.3f}") in md
    # Removed op time is summed over threads: labelled so, and flagged when it exceeds the step.
    assert "| removed op ms/step |" in md
    assert doc["removed_time_is"].startswith("op time summed over the threads")
    assert ("more than the wall step" in doc["removed_time_is"]) == fix_report.removed_exceeds_step


def _assert_fails_for_the_right_reason(report: VerifyReport) -> None:
    checks = {c.number: c for c in report.checks}
    assert not report.passed
    assert not checks[1].passed and not checks[2].passed
    # Named for the right reason: the off-menu sample() compile, with JAX's own explanation.
    # Every round starts the sampler cold (restart_sampler), so the miss compiles in every round.
    assert all(r.compiles >= 1 for r in report.treatment.rounds) and report.baseline.compiles == 0
    assert not any("cannot restart" in n or "re-warmed" in n for n in report.notes), report.notes
    assert "jit(sample)" in checks[1].detail
    assert "bf16[8,1024]" in checks[1].detail and "f32[8,1024]" in checks[1].detail
    assert report.verdict.startswith("FAIL: steady-state compiles; batch TTFT ratio")
    # The tokens are right: only the compiles and the latency give these attempts away (and the
    # treatment's own trace: the eager convert program, HD003, is still there in both).
    assert checks[3].passed
    assert not checks[4].passed and "HD003" in checks[4].figure


def test_seed_attempt_conditional_output_convert_fails(baseline_run: Path, tmp_path: Path) -> None:
    tree = build_attempt("conditional-output-convert", ENGINE, tmp_path / "attempt")
    settings = VerifySettings(treatment=tree, baseline_run=baseline_run, out_dir=tmp_path / "out",
                              **{**SMALL, "rounds": 2})  # type: ignore[arg-type]
    _assert_fails_for_the_right_reason(run_verify(settings))


def test_cli_fails_seed_attempt_runner_convert_removed_with_exit_1(baseline_run: Path, tmp_path: Path) -> None:
    tree = build_attempt("runner-convert-removed", ENGINE, tmp_path / "attempt")
    result = CliRunner().invoke(main, [
        "verify", "--treatment", str(tree), "--vocab", "1024", "--batch", "8", "--max-tokens", "6",
        "--rounds", "2", "--baseline-run", str(baseline_run), "--format", "json", "--out", str(tmp_path / "out"),
    ], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["passed"] is False
    assert [c["passed"] for c in doc["checks"]][:2] == [False, False]
    assert "jit(sample)" in doc["checks"][0]["detail"] and "bf16[8,1024]" in doc["checks"][0]["detail"]
    assert doc["verdict"].startswith("FAIL: steady-state compiles; batch TTFT ratio")
    assert (tmp_path / "out" / "verify.json").is_file() and (tmp_path / "out" / "verify.md").is_file()
    assert "verify: FAIL" in result.stderr


def test_seed_attempts_are_built_by_exact_edits(tmp_path: Path) -> None:
    assert sorted(ATTEMPTS) == ["conditional-output-convert", "runner-convert-removed"]
    tree = build_attempt("runner-convert-removed", ENGINE, tmp_path / "b")
    runner = (tree / "runner.py").read_text()
    assert runner.count("logits = logits.astype(jnp.float32)") == 1  # only the post-sample one is left
    # The precompile menu is untouched: still float32 dummies.
    assert (tree / "compilation_manager.py").read_text() == (ENGINE / "compilation_manager.py").read_text()
    with pytest.raises(AssertionError, match="anchor found 0 times"):
        build_attempt("runner-convert-removed", tree, tmp_path / "twice")


@pytest.mark.parametrize("args, message", [
    ([], "nothing to verify"),
    (["--fix", "no-such-fix"], "unknown fix"),
    (["--treatment", "/nonexistent/tree"], "is not a directory"),
    (["--fix", "bf16-greedy-sampler", "--rounds", "0"], "--rounds 0"),
    (["--fix", "bf16-greedy-sampler", "--max-tokens", "1"], "--max-tokens 1"),
    (["--fix", "bf16-greedy-sampler", "--ttft-bound", "0.5"], "--ttft-bound"),
    (["--fix", "bf16-greedy-sampler", "--baseline", ".", "--treatment", "."], "--fix with both"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["verify", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_a_folder_that_is_not_an_engine_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not an engine")
    result = CliRunner().invoke(main, ["verify", "--treatment", str(tmp_path), "--vocab", "1024", "--batch", "8"])
    assert result.exit_code == 2, result.output
    assert "not an engine source tree" in result.stderr


def test_impossible_engine_config_is_input_error() -> None:
    from hlo_doctor.engines import load_engine

    with pytest.raises(InputError, match="vocab_size"):
        engine_config(load_engine(None), VerifySettings(fix="bf16-greedy-sampler", vocab=4, batch=8))


def _summary(label: str, ttfts: list[float]) -> VariantSummary:
    rounds = tuple(RoundResult(label, i, i, 100.0, t, 10.0, (10.0,), 0, (), "") for i, t in enumerate(ttfts))
    return VariantSummary(label, "tree", "module", 0.0, rounds)


def test_ttft_check_uses_fastest_rounds_with_cold_rounds_and_worst_rounds_without() -> None:
    base = _summary("baseline", [100, 100, 100, 100, 100])
    one_spike = _summary("treatment", [300, 100, 100, 100, 100])
    every_round = _summary("treatment", [130, 130, 130, 130, 130])
    # Cold rounds: a miss compiles in every round, so it stays in the fastest round; one spike does not.
    assert check_ttft(base, one_spike, 1.25, cold=True).passed
    assert not check_ttft(base, every_round, 1.25, cold=True).passed
    # Two rounds a side and one slow baseline round (a loaded machine): the medians would pass a compile
    # in every treatment round (x0.70); the fastest rounds show it (x1.40).
    hiccup = check_ttft(_summary("baseline", [100, 300]), _summary("treatment", [140, 140]), 1.25, cold=True)
    assert not hiccup.passed and hiccup.figure.startswith("x1.40 fastest round") and "median x0.70" in hiccup.figure
    # Warm rounds: a miss compiles in the first round only, so the worst round counts as well.
    assert not check_ttft(base, one_spike, 1.25, cold=False).passed
    check = check_ttft(base, _summary("treatment", [110, 100, 100, 100, 100]), 1.25, cold=False)
    assert check.passed and "x1.10 worst round" in check.figure


def test_logprobs_are_compared_bit_for_bit(baseline_run: Path, tmp_path: Path) -> None:
    settings = VerifySettings(fix="bf16-greedy-sampler", logprobs=True, baseline_run=baseline_run,
                              out_dir=tmp_path, **{**SMALL, "rounds": 1})  # type: ignore[arg-type]
    report = run_verify(settings)
    checks = {c.number: c for c in report.checks}
    assert checks[1].passed, checks[1]
    assert checks[3].passed and "logprobs f32, bit-identical" in checks[3].figure
