"""A fix's promise measured on the program itself: ``profile FILE.py:FUNC``, then ``diagnose`` times
the step with and without the fix (verify's program A/B), keeps the figure with the capture and reuses it.

Real JAX on XLA:CPU, the real CLI. What proves the A/B ran is outside the code under test: the fixed
copy's own step times stored beside the capture (a record of kind ``program-ab/fix`` with every
round's times), and the second diagnosis's JSON byte for byte the first's while the store file is
not written again. A capture whose file changed since is refused in one line and keeps the replay's
or the model's figure.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hlo_doctor.cli import main
from hlo_doctor.lint.program_ab import KIND
from hlo_doctor.lint.store import FILE_NAME

_PROGRAM = '''\
import jax
import jax.numpy as jnp

_LOGITS = jax.random.normal(jax.random.key(0), (16, 16384), jnp.bfloat16)


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1)


def step():
    logits = _LOGITS.astype(jnp.float32)
    return sample(logits)
'''


# The A/B's budget (HLO_DOCTOR_MEASURE_SECONDS, default 10 s): a shorter one, which its record must carry.
BUDGET_S = 4.0


def _run(args: list[str], cache: Path) -> Result:
    return CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": "", "XDG_CACHE_HOME": str(cache),
                                               "HLO_DOCTOR_MEASURE_SECONDS": f"{BUDGET_S:g}"},
                              catch_exceptions=False)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("program_ab")
    (folder / "sampler.py").write_text(textwrap.dedent(_PROGRAM))
    out = folder / "run"
    r = _run(["profile", f"{folder / 'sampler.py'}:step", "--steps", "4", "--warmup", "2", "--out", str(out),
              "--format", "json"], folder / "cache")
    assert r.exit_code == 0, r.output
    for stale in out.glob(FILE_NAME):  # what profile's report measured: this test measures its own
        stale.unlink()
    return out


def _diagnose(run: Path, out: Path) -> tuple[Result, bytes]:
    # The program's folder is the project: a fix is offered only on code inside it.
    r = _run(["diagnose", str(run), "--format", "json", "-o", str(out), "--source-root", str(run.parent)],
             run.parent / "cache")
    assert r.exit_code == 0, r.output
    return r, out.read_bytes()


def test_a_program_targets_fix_is_measured_by_the_program_ab_stored_and_reused(profiled: Path) -> None:
    first, doc1 = _diagnose(profiled, profiled.parent / "d1.json")
    (fix,) = [p for p in json.loads(doc1)["fixes"] if p["fix"] == "eager-widening"]
    ab = fix["program_ab"]
    lo, hi = ab["interval_us"]
    # An A/B that did not decide leaves the replay's figure where the replay decided a saving inside
    # the A/B's interval (lint.promise.FixPromise.replay_stands); otherwise the A/B is the promise.
    replay = fix["replay"]
    stands = not (lo > 0 or hi < 0) and replay is not None and replay["here_interval_us"][0] > 0 \
        and lo <= replay["promise_us"] <= hi
    assert fix["how"] == ("replay" if stands else "program A/B") and fix["basis"] == "measured", fix
    assert ab["target"].endswith("sampler.py:step") and ab["lines"] == [13]
    assert ab["rounds"] >= 3 and ab["steps"] == 5 and ab["stopped"] in ("decided", "budget spent")
    assert ab["budget_s"] == BUDGET_S
    assert lo <= ab["saving_us"] <= hi and ab["ratio_interval"][0] <= ab["ratio"] <= ab["ratio_interval"][1]
    # The promise is the A/B's: its saving where the interval clears 0, else the replay's where it
    # stands, else nothing promised.
    assert fix["net_us"] == (ab["saving_us"] if lo > 0 or hi < 0 else replay["promise_us"] if stands else 0.0)
    if hi < 0:
        assert fix["verdict"] == "no saving expected"
    # Stored with every round's step times of both sides (us), keyed like the replay.
    store = profiled / FILE_NAME
    (rec,) = [r for r in json.loads(store.read_text())["records"] if r["kind"] == KIND]
    assert len(rec["samples"]["baseline"]) == len(rec["samples"]["treatment"]) == ab["rounds"] * ab["steps"]
    assert rec["budget_s"] == ab["budget_s"] and rec["stopped"] == ab["stopped"]
    assert {"replay/fix", KIND} <= {r["kind"] for r in json.loads(store.read_text())["records"]}
    before = (store.read_bytes(), store.stat().st_mtime_ns)

    second, doc2 = _diagnose(profiled, profiled.parent / "d2.json")
    assert doc2 == doc1  # byte for byte: the stored A/B (and replay) reused, nothing timed again
    assert "reused from" in second.stderr and "measured here, kept" not in second.stderr
    assert (store.read_bytes(), store.stat().st_mtime_ns) == before


def test_a_file_changed_since_the_capture_is_not_timed_and_says_why_in_one_line(profiled: Path,
                                                                                  tmp_path: Path) -> None:
    folder = tmp_path / "moved"
    shutil.copytree(profiled.parent, folder, ignore=shutil.ignore_patterns("d*.json", "cache"))
    run = folder / "run"
    # The capture names its file by its path: the original's, edited after the capture.
    source = profiled.parent / "sampler.py"
    kept = source.read_text()
    try:
        source.write_text(kept + "\n# edited after the capture\n")
        r = _run(["diagnose", str(run), "--source-root", str(profiled.parent)], tmp_path / "cache")
    finally:
        source.write_text(kept)
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("fix eager-widening")]
    assert "no program A/B: " in line and "changed since the capture" in line
    assert "program A/B of" not in line  # the replay's or the model's figure, said so
    assert "replaying" in line or "a model" in line
