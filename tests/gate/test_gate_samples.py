"""hlo-doctor gate on the committed sample traces of the reference engine (batch 64, vocab 256000)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
FIXED = SAMPLES / "engine_b64_fixed"
ORIGINAL_A = SAMPLES / "engine_b64_original_a"
ORIGINAL_B = SAMPLES / "engine_b64_original_b"
SEED_TPU = SAMPLES / "seed_v5e_b512" / "opstats.json"


@pytest.fixture(autouse=True)
def _no_repo_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)


def _gate(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["gate", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def test_fixed_engine_baseline_original_engine_candidate_fails() -> None:
    code, out, err = _gate(FIXED, ORIGINAL_A, "--format", "json")
    assert code == 1, err
    doc = json.loads(out)
    new = {v["key"]: v for v in doc["violations"] if v["rule"] == "new-op"}
    assert set(new) == {"jit_sample|copy|f32[64,256000]", "jit_convert_element_type|fusion|f32[64,256000]"}
    copy = new["jit_sample|copy|f32[64,256000]"]
    assert copy["message"].startswith("new aliasing copy copy f32[64,256000]{1,0} in jit_sample: ")
    assert copy["time_per_step_us"] > 1000
    convert = new["jit_convert_element_type|fusion|f32[64,256000]"]
    assert convert["message"].startswith(
        "new standalone convert wrapped_convert f32[64,256000]{1,0} in jit_convert_element_type: ")
    assert "65,536,000 bytes written" in convert["message"]
    assert "new aliasing copy copy f32[64,256000]{1,0} in jit_sample" in err


@pytest.mark.parametrize(("base", "cand"), [(ORIGINAL_A, ORIGINAL_B), (ORIGINAL_B, ORIGINAL_A)])
def test_same_engine_captured_twice_passes_in_both_orders(base: Path, cand: Path) -> None:
    code, out, err = _gate(base, cand, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "pass" and doc["summary"]["new"] == doc["summary"]["vanished"] == 0


def test_fixing_it_passes_and_reports_the_ops_gone() -> None:
    code, out, err = _gate(ORIGINAL_A, FIXED, "--format", "json")
    assert code == 0, err
    gone = {o["key"] for o in json.loads(out)["ops"] if o["status"] == "vanished"}
    assert gone == {"jit_sample|copy|f32[64,256000]", "jit_convert_element_type|fusion|f32[64,256000]"}


def test_cpu_capture_against_the_tpu_report_is_refused() -> None:
    code, _, err = _gate(ORIGINAL_A, SEED_TPU)
    assert code == 2
    assert "different backends (cpu vs tpu)" in err and "Traceback" not in err


def test_table_format_to_a_file_is_plain_text(tmp_path: Path) -> None:
    target = tmp_path / "gate.txt"
    code, out, err = _gate(FIXED, ORIGINAL_A, "--output", target, "--rows", "3")
    assert code == 1 and out == ""
    text = target.read_text()
    # two new ops (time) and two programs whose peak grew (memory)
    assert text.startswith("hlo-doctor gate: FAIL: 4 regressions\n")
    assert "FAIL [new-op] new aliasing copy copy f32[64,256000]{1,0} in jit_sample" in text
    assert "FAIL [peak-memory] jit_sample peak 31.3 MiB -> 125.0 MiB" in text
    assert "\x1b[" not in text  # no terminal colour codes in a file
