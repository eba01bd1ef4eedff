"""``verify --target``: the real sample() of released tpu-inference wheels against their patched copies,
at program level on XLA:CPU; and the bad input of --target / --bench (exit 2, target untouched)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_wheels import newest_release, tree_bytes, unpack

from hlo_doctor.cli import main
from hlo_doctor.verify.tpu_inference.sampler_tree import source_facts
from hlo_doctor.verify.tpu_inference.tpu_shim import needed_names

ENGINE = Path(__file__).resolve().parents[2] / "hlo_doctor" / "engine"
SMALL = ["--batch", "8", "--vocab", "1024", "--steps", "4"]
RUNNER_WIDEN = "            logits = logits.astype(jnp.float32)\n            with self.maybe_forbid_compile:\n"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("wheels")
    return {v: unpack(v, base / v) for v in ("0.24.0", newest_release())}


def _verify(*args: str) -> tuple[int, dict, str]:
    result = CliRunner().invoke(main, ["verify", *args, "--format", "json"])
    doc = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.exit_code, doc, result.stderr


def _checks(doc: dict, level: str = "program") -> dict[int, dict]:
    return {c["number"]: c for lvl in doc["levels"] if lvl["level"] == level for c in lvl["checks"]}


def test_target_0_24_0_program_level(wheels: dict[str, Path]) -> None:
    tree = wheels["0.24.0"]
    before = tree_bytes(tree)
    code, doc, err = _verify("--target", str(tree), "--rounds", "5", *SMALL)
    assert code in (0, 1), err
    checks = _checks(doc)
    # Compiles, tokens (ties, bf16-rounding ties, NaN, -inf rows), the treatment's HLO and HD006 pass.
    for n in (1, 3, 4, 6):
        assert checks[n]["passed"], checks[n]
    assert "argmax reads bf16[8,1024]; copy none; logits out none" in checks[4]["figure"]
    assert not checks[5]["figure"].startswith("not run")  # measured, whatever the backend says
    # Check 5 decides as every kind does: the per-call step times, rounds as blocks, 5 AB/BA pairs.
    level = doc["levels"][0]
    assert checks[5]["name"] == "step-time verdict" and "5 rounds a side" in checks[5]["figure"]
    assert level["step_time"]["method"] == "paired rounds" and level["step_time"]["blocks"] == 5
    assert level["step_time"]["n_baseline"] == 5 * 3  # each round's steps after its cold first one
    assert level["throughput"]["method"] == "paired rounds" and level["throughput"]["n_baseline"] == 5
    assert level["figures"]["stopping"]["reason"] == "fixed"
    if doc["passed"]:
        assert doc["verdict"] == level["step_time"]["outcome"]
    elif not checks[5]["passed"]:
        assert "program step-time verdict" in doc["verdict"]
    base = doc["levels"][0]["figures"]["baseline"]
    assert base["runner_widens"] and base["menu_dtype"] == "float32"
    assert doc["levels"][0]["figures"]["baseline_hlo"]["aliasing_copy"] is True
    assert any("stood in for" in n and "vllm.v1.outputs.LogprobsTensors" in n for n in doc["notes"])
    assert tree_bytes(tree) == before  # the target is never written


def test_newest_release_that_cannot_lower_reports_not_run(wheels: dict[str, Path]) -> None:
    version = newest_release()
    code, doc, err = _verify("--target", str(wheels[version]), "--rounds", "1", *SMALL)
    checks = _checks(doc)
    if doc["levels"][0]["figures"]["baseline"]["lower_error"] is None:
        pytest.skip(f"{version}'s sample() lowers on this backend")
    assert code == 1 and not doc["passed"]
    for n in range(1, 6):
        assert checks[n]["figure"].startswith("not run: ") and not checks[n]["passed"]
    assert "compile option" in checks[4]["figure"]
    assert checks[6]["passed"]  # HD006 reads the source: it runs
    # The same body jitted without the TPU options: the program checks run, and the report says so.
    code, doc, err = _verify("--target", str(wheels[version]), "--rounds", "1", "--without-compiler-options", *SMALL)
    checks = _checks(doc)
    assert checks[3]["passed"] and checks[4]["passed"], checks
    assert any("without the release's compiler options" in n for n in doc["notes"])


def test_hand_fix_that_keeps_the_f32_menu_fails_on_compiles_and_hd006(wheels: dict[str, Path], tmp_path: Path) -> None:
    # The seed's 0.24.0 attempt: the runner's widening removed, the precompile menu left at float32.
    half = Path(shutil.copytree(wheels["0.24.0"], tmp_path / "half"))
    runner = half / "tpu_inference" / "runner" / "tpu_runner.py"
    text = runner.read_text()
    assert text.count(RUNNER_WIDEN) == 1
    runner.write_text(text.replace(RUNNER_WIDEN, "            with self.maybe_forbid_compile:\n"))
    facts = source_facts(runner, half / "tpu_inference" / "runner" / "compilation_manager.py")
    assert (facts.runner_dtype, facts.menu_dtype) == ("bfloat16", "float32")
    code, doc, err = _verify("--target", str(wheels["0.24.0"]), "--treatment", str(half), "--rounds", "2", *SMALL)
    assert code == 1, err
    checks = _checks(doc)
    assert not checks[1]["passed"]
    assert "treatment round 1: jit(sample): at logits, now bf16[8,1024] and before f32[8,1024]" in checks[1]["detail"]
    assert not checks[2]["passed"]  # a compile inside the first step of every cold round
    assert not checks[6]["passed"] and "HD006" in checks[6]["detail"]


def test_shim_stands_in_for_exactly_the_imported_names(wheels: dict[str, Path]) -> None:
    needs = needed_names(wheels["0.24.0"] / "tpu_inference", ("vllm", "torch", "torchax"))
    assert needs["vllm.v1.outputs"] == {"LogprobsTensors"}
    assert needs["vllm.logger"] == {"_VllmLogger", "init_logger"}
    # Only the stood-in packages: nothing of JAX or of tpu_inference itself.
    assert {m.split(".")[0] for m in needs} <= {"vllm", "torch", "torchax"}


@pytest.mark.parametrize("args, message", [
    (["--target", str(ENGINE)], "not a tpu-inference tree"),
    (["--target", "/nonexistent/tree"], "does not exist"),
    (["--target", ".", "--bench", "echo {tree}"], "lacks the {tree} or {out} placeholder"),
    (["--bench-metrics", "speed=x", "--fix", "bf16-greedy-sampler", "--bench", "true {tree} {out}"], "--bench-metrics"),
])
def test_bad_target_input_is_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["verify", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output


def test_a_tree_the_fix_does_not_know_is_exit_2(wheels: dict[str, Path], tmp_path: Path) -> None:
    odd = Path(shutil.copytree(wheels["0.24.0"], tmp_path / "odd"))
    sampler = odd / "tpu_inference" / "layers" / "jax" / "sample" / "sampling.py"
    sampler.write_text(sampler.read_text().replace("greedy_tokens = jnp.argmax(logits, axis=-1)",
                                                   "greedy_tokens = jnp.argmin(-logits, axis=-1)"))
    before = tree_bytes(odd)
    result = CliRunner().invoke(main, ["verify", "--target", str(odd)])
    assert result.exit_code == 2, result.output
    assert "does not know --target" in result.stderr
    assert tree_bytes(odd) == before


@pytest.mark.parametrize("command, extra, message", [
    ("false {tree} {out}", [], "--bench round 1 (baseline) failed with exit 1"),
    ("sleep 5 # {tree} {out}", ["--bench-timeout", "1"], "--bench round 1 (baseline) timed out after 1 s"),
    ("true {tree} {out}", [], "--bench round 1 (baseline) wrote no JSON"),
])
def test_bench_that_fails_times_out_or_writes_nothing_is_exit_2(wheels: dict[str, Path], command: str,
                                                                 extra: list[str], message: str) -> None:
    tree = wheels["0.24.0"]
    before = tree_bytes(tree)
    result = CliRunner().invoke(main, ["verify", "--target", str(tree), "--bench", command, *extra])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output
    assert tree_bytes(tree) == before


def _sleepers(seconds: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", seconds.encode()]:
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_a_bench_whose_children_outlive_the_timeout_is_stopped_whole(wheels: dict[str, Path]) -> None:
    """A benchmark that starts a server in the background and hangs: the round ends at --bench-timeout
    (not when the last child lets go of the output), and nothing it started is left running."""
    tree = wheels["0.24.0"]
    started = time.monotonic()
    result = CliRunner().invoke(main, ["verify", "--target", str(tree), "--bench",
                                       "sleep 97 & sleep 96 # {tree} {out}", "--bench-timeout", "1"])
    assert result.exit_code == 2 and "timed out after 1 s" in result.stderr, result.output
    assert time.monotonic() - started < 45  # the children would hold the pipes for 96 s
    deadline = time.monotonic() + 10
    while (_sleepers("97") or _sleepers("96")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _sleepers("97") and not _sleepers("96")


# A stand-in for `vllm bench throughput --output-json {out}`: vllm's field names; on the treatment it
# fails as tpu-inference's recompilation check does when a step misses the precompiled menu.
FAKE_VLLM_BENCH = (
    f"{sys.executable} -c \"import json, os, sys; tree, out = sys.argv[1:3]; "
    "assert os.environ['VLLM_XLA_CHECK_RECOMPILATION'] == '1'; "
    "sys.exit('RecompilationError: sample recompiled after warm-up') if 'treatment' in tree and {fail} else None; "
    "json.dump({{'tokens_per_second': 1000.0, 'median_ttft_ms': 20.0, 'elapsed_time': 1.0}}, open(out, 'w'))\" "
    "{{tree}} {{out}}"
)


def test_bench_reads_vllm_fields_and_the_recompilation_check(wheels: dict[str, Path]) -> None:
    package = wheels["0.24.0"] / "tpu_inference"  # the package-directory form of a target
    code, doc, err = _verify("--target", str(package), "--rounds", "1", "--bench", FAKE_VLLM_BENCH.format(fail=False),
                             *SMALL)
    serving = _checks(doc, "serving")
    assert serving[1]["passed"] and serving[1]["figure"] == "treatment 0, baseline 0"
    assert serving[2]["passed"] and 3 not in serving  # no tokens in vllm's JSON: no token check at this level
    # One throughput per round, compared within its AB/BA pair: one pair is too few to test.
    tp = next(lvl for lvl in doc["levels"] if lvl["level"] == "serving")["throughput"]
    assert tp["method"] == "paired rounds" and tp["outcome"] == "inconclusive"
    assert "too few pairs of rounds" in serving[5]["detail"] and not serving[5]["passed"]
    assert doc["treatment"].endswith("/tpu_inference")
    code, doc, err = _verify("--target", str(package), "--rounds", "1", "--bench", FAKE_VLLM_BENCH.format(fail=True),
                             *SMALL)
    serving = _checks(doc, "serving")
    assert code == 1 and not serving[1]["passed"] and "recompiled after warm-up" in serving[1]["detail"]
    assert serving[5]["figure"].startswith("not run")
