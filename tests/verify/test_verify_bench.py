"""``verify --bench``: the serving level, with the reference engine standing in for the benchmark
(``hlo-doctor engine run --format json --engine {tree} --output {out}``), on XLA:CPU at small sizes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from seed_attempts import build_attempt

from hlo_doctor.cli import main

ENGINE = Path(__file__).resolve().parents[2] / "hlo_doctor" / "engine"
BENCH = (f"{sys.executable} -m hlo_doctor.cli engine run --format json --engine {{tree}} --output {{out}} "
         "--batch 8 --vocab 1024 --max-tokens 6 --max-num-reqs 8")
SIZES = ["--batch", "8", "--vocab", "1024", "--format", "json"]

pytestmark = pytest.mark.slow


def _levels(doc: dict) -> dict[str, dict[int, dict]]:
    return {lvl["level"]: {c["number"]: c for c in lvl["checks"]} for lvl in doc["levels"]}


def test_bench_full_fix_passes_every_check_but_the_timing_one(tmp_path: Path) -> None:
    # 2 rounds per tree (each a serving benchmark of its own): check 5's outcome is this machine's and not
    # this test's (its PASS figures at 5 rounds are in docs/verify.md). TTFT bound as in test_verify (x2.5:
    # the fastest of 2 rounds of a prefill the fix leaves alone measured x1.5 and more on a loaded machine;
    # the hand fix that misses the menu multiplies it far more, test_bench_seed_hand_fix_fails).
    # The full fix's runs share JAX's persistent compilation cache, as on the device (checks.sh): only
    # each tree's first run compiles its menu. (The hand fix's runs below do not: its compiles are its
    # failure.)
    cache = (f"env JAX_COMPILATION_CACHE_DIR={tmp_path / 'jax-cache'} JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 "
             "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0 ")
    result = CliRunner().invoke(main, ["verify", "--fix", "bf16-greedy-sampler", "--bench", cache + BENCH, "--rounds",
                                       "2", "--ttft-bound", "2.5", "--out", str(tmp_path / "out"), *SIZES])
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    levels = _levels(doc)
    serving, program = levels["serving"], levels["program"]
    assert serving[1]["passed"] and serving[1]["figure"] == "treatment 0, baseline 0"
    assert serving[2]["passed"] and serving[3]["passed"], serving
    assert program[4]["passed"] and program[6]["passed"], program
    assert serving[5]["figure"].split(":")[0] in ("improved", "no change", "regressed", "inconclusive")
    assert (tmp_path / "out" / "verify.json").is_file() and (tmp_path / "out" / "bench" / "baseline-1.json").is_file()


def test_bench_seed_hand_fix_fails(tmp_path: Path) -> None:
    tree = build_attempt("runner-convert-removed", ENGINE, tmp_path / "attempt")
    result = CliRunner().invoke(main, ["verify", "--treatment", str(tree), "--bench", BENCH, "--rounds", "2",
                                       *SIZES])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert next(iter(doc)) == "schema" and doc["schema"] == "hlo-doctor.verify-target/1"
    serving, program = _levels(doc)["serving"], _levels(doc)["program"]
    # Off the precompiled menu in every run: compiles after warm-up, and the batch TTFT multiplied.
    assert not serving[1]["passed"] and "treatment round 1" in serving[1]["detail"]
    assert not serving[2]["passed"]
    assert not program[6]["passed"]  # HD006: the menu is still keyed on float32
    assert not doc["passed"] and doc["verdict"].startswith("FAIL")
