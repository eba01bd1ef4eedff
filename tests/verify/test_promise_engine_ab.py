"""A fix's promise measured on the engine itself: ``profile`` of an engine tree, then ``diagnose`` times
the engine with and without ``bf16-greedy-sampler`` (verify's engine A/B), keeps the figure with the
capture and reuses it.

Real JAX on XLA:CPU, a real engine tree (a copy of the bundled one, so that it can be edited), the
real CLI. What proves the A/B ran is outside the code under test: both engines' own decode step times
stored beside the capture (kind ``engine-ab/fix``, every round's times), the second diagnosis's JSON
byte for byte the first's while the store file is not written again. An engine file changed since
the capture is refused in one line and the replay's or the model's figure stays.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hlo_doctor.cli import main
from hlo_doctor.lint.engine_ab import KIND
from hlo_doctor.lint.store import FILE_NAME

pytestmark = pytest.mark.slow

FIX = "bf16-greedy-sampler"


# The A/B's budget (HLO_DOCTOR_MEASURE_SECONDS, default 10 s): a shorter one, which its record must carry.
BUDGET_S = 4.0


def _run(args: list[str], cache: Path) -> Result:
    return CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": "", "XDG_CACHE_HOME": str(cache),
                                               "HLO_DOCTOR_MEASURE_SECONDS": f"{BUDGET_S:g}"},
                              catch_exceptions=False)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import hlo_doctor.engine as bundled

    folder = tmp_path_factory.mktemp("engine_ab")
    tree = folder / "engine"
    shutil.copytree(Path(bundled.__file__).parent, tree, ignore=shutil.ignore_patterns("__pycache__"))
    out = folder / "run"
    r = _run(["profile", "--engine", str(tree), "--batch", "8", "--vocab", "4096", "--layers", "1", "--steps", "2",
              "--warmup", "1", "--out", str(out), "--format", "json"], folder / "cache")
    assert r.exit_code == 0, r.output
    for stale in out.glob(FILE_NAME):  # what profile's report measured: this test measures its own
        stale.unlink()
    return out


def _diagnose(run: Path, out: Path) -> tuple[Result, bytes]:
    # The engine's folder is the project: the tree fix is offered on it.
    r = _run(["diagnose", str(run), "--format", "json", "-o", str(out), "--source-root", str(run.parent / "engine")],
             run.parent / "cache")
    assert r.exit_code == 0, r.output
    return r, out.read_bytes()


def test_the_engines_fix_is_measured_by_the_engine_ab_stored_and_reused(profiled: Path) -> None:
    first, doc1 = _diagnose(profiled, profiled.parent / "d1.json")
    (fix,) = [p for p in json.loads(doc1)["fixes"] if p["fix"] == FIX]
    ab = fix["program_ab"]
    lo, hi = ab["interval_us"]
    # An A/B that did not decide leaves the replay's figure where the replay decided a saving inside
    # the A/B's interval (lint.promise.FixPromise.replay_stands); otherwise the A/B is the promise.
    replay = fix["replay"]
    stands = not (lo > 0 or hi < 0) and replay is not None and replay["here_interval_us"][0] > 0 \
        and lo <= replay["promise_us"] <= hi
    assert fix["how"] == ("replay" if stands else "program A/B") and fix["basis"] == "measured", (fix, first.stderr)
    assert ab["target"].startswith(f"the engine at {profiled.parent / 'engine'} (batch 8, vocab 4096, layers 1")
    assert ab["lines"] == [] and ab["steps"] == 15  # every decode step of a 16-token batch
    assert ab["rounds"] >= 3 and ab["stopped"] in ("decided", "budget spent") and ab["budget_s"] == BUDGET_S
    assert lo <= ab["saving_us"] <= hi and ab["ratio_interval"][0] <= ab["ratio"] <= ab["ratio_interval"][1]
    # The promise is the A/B's: its saving where the interval clears 0, else the replay's where it
    # stands, else nothing promised.
    assert fix["net_us"] == (ab["saving_us"] if lo > 0 or hi < 0 else replay["promise_us"] if stands else 0.0)
    if hi < 0:
        assert fix["verdict"] == "no saving expected"
    # HD002's copy has no source line of its own, so no fix on its line; the tree fix removes it, its
    # promise counts it, and the A/B times the whole fix.
    # (A loaded machine can add HD015, host-bound, which has no fix: only these three are this test's.)
    codes = sorted(f["code"] for f in json.loads(doc1)["findings"] if f["code"] != "HD015")
    assert codes == ["HD002", "HD003", "HD004"] and fix["findings"] == 3, (codes, fix)
    # The terminal line says how it was measured, and that an undecided A/B promises nothing.
    (line,) = [x for x in _run(["diagnose", str(profiled), "--source-root", str(profiled.parent / "engine")],
                               profiled.parent / "cache").output.splitlines() if x.startswith(f"fix {FIX}")]
    assert "measured by a program A/B of the engine at" in line and "alternated" in line and "measured here" in line
    assert ("; the A/B did not decide, and the replay's figure, inside its interval, stands: " in line) == stands
    # Stored with every round's decode step times of both engines (us).
    store = profiled / FILE_NAME
    (rec,) = [r for r in json.loads(store.read_text())["records"] if r["kind"] == KIND]
    assert len(rec["samples"]["baseline"]) == len(rec["samples"]["treatment"]) == ab["rounds"] * ab["steps"]
    assert rec["budget_s"] == ab["budget_s"] and rec["stopped"] == ab["stopped"]
    assert "sources sha256:" in rec["key"] and "batch 8" in rec["key"] and len(rec["key"]) <= 400
    before = (store.read_bytes(), store.stat().st_mtime_ns)

    second, doc2 = _diagnose(profiled, profiled.parent / "d2.json")
    assert doc2 == doc1  # byte for byte: the stored A/B (and replay) reused, nothing timed again
    assert "reused from" in second.stderr and "measured here, kept" not in second.stderr
    assert (store.read_bytes(), store.stat().st_mtime_ns) == before


def test_an_engine_file_changed_since_the_capture_is_not_timed_and_says_why_in_one_line(profiled: Path,
                                                                                        tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(profiled, run, ignore=shutil.ignore_patterns(FILE_NAME))
    # run.json fingerprints the engine files the ops' lines are in; one of them edited after the capture.
    (edited,) = [Path(k) for k in json.loads((run / "run.json").read_text())["source_sha256"]
                 if k.endswith("engine/sampling.py")]
    kept = edited.read_text()
    try:
        edited.write_text(kept + "\n# edited after the capture\n")
        r = _run(["diagnose", str(run), "--source-root", str(profiled.parent / "engine")], tmp_path / "cache")
    finally:
        edited.write_text(kept)
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.output.splitlines() if x.startswith(f"fix {FIX}")]
    assert "no program A/B: " in line and "sampling.py changed since the capture" in line
    assert "program A/B of" not in line  # the replay's or the model's figure, said so
    assert "replaying" in line or "a model" in line
    store = run / FILE_NAME
    assert not store.exists() or not any(r["kind"] == KIND for r in json.loads(store.read_text())["records"])


def test_a_tpu_inference_capture_says_in_one_line_why_its_fix_is_not_timed_here(tmp_path: Path) -> None:
    from fixtures_wheels import unpack

    tree = unpack("0.24.0", tmp_path / "tpu")  # the project the capture's lines are in: the fix is offered
    capture = Path(__file__).resolve().parents[2] / "sample_traces" / "seed_v5e_b512"
    r = _run(["diagnose", str(capture), "--source-root", str(tree)], tmp_path / "cache")
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.output.splitlines() if x.startswith(f"fix {FIX}")]
    assert "no program A/B: a capture of tpu-inference ran on tpu: this machine cannot run its server again" in line
    assert "a model" in line  # the model's figure stays, said so
