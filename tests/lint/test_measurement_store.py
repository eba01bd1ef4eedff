"""The same capture, the same answer: what a what-if measures here is kept with the capture and reused.

Real captures (a sampler step profiled here with this jax, so its what-if runs on either jaxlib; the
engine's sample traces), real XLA:CPU timings, the real CLI. What proves reuse is outside the code
under test: the store file's bytes and mtime, and a stored record edited by hand that the next
diagnosis then reports figure for figure (a fresh timing could never give exactly those numbers).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hlo_doctor.cli import main
from hlo_doctor.lint import diagnose, load_context, load_rulebook
from hlo_doctor.lint.measurement import paired_ratio
from hlo_doctor.lint.store import FILE_NAME, SCHEMA, MeasurementStore
from hlo_doctor.lint.whatif import KIND

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"

_PROGRAM = '''\
import jax
import jax.numpy as jnp

_LOGITS = jax.random.normal(jax.random.key(0), (16, 16384), jnp.bfloat16)


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1)


def step():
    return sample(_LOGITS.astype(jnp.float32))
'''


# What these tests judge is the store, not the figures measured into it: short measuring budgets.
_BUDGETS = {"HLO_DOCTOR_MEASURE_SECONDS": "1", "HLO_DOCTOR_WHAT_IF_SECONDS": "1"}


def _run(args: list[str], cache: Path, **env: str) -> Result:
    return CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": "", "XDG_CACHE_HOME": str(cache), **_BUDGETS,
                                               **env}, catch_exceptions=False)


def _diagnose(run: Path, cache: Path, *extra: str, **env: str) -> tuple[Result, dict]:
    out = run.parent / f"diagnosis-{len(list(run.parent.glob('diagnosis-*')))}.json"
    r = _run(["diagnose", str(run), "--format", "json", "-o", str(out), *extra], cache, **env)
    assert r.exit_code == 0, r.output
    return r, json.loads(out.read_text())


def _hd004(doc: dict) -> dict:
    (f,) = [f for f in doc["findings"] if f["code"] == "HD004"]
    return f


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory profile wrote (its marker in it): an eager astype before a jitted argmax."""
    folder = tmp_path_factory.mktemp("store_capture")
    (folder / "sampler.py").write_text(textwrap.dedent(_PROGRAM))
    out = folder / "run"
    r = CliRunner().invoke(main, ["profile", f"{folder / 'sampler.py'}:step", "--steps", "5", "--warmup", "2",
                                  "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture
def run(profiled: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(profiled, copy)
    for stale in copy.glob(FILE_NAME):
        stale.unlink()
    return copy


@pytest.fixture(scope="module")
def measured_once(profiled: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory after one diagnosis measured it (its store beside the capture): what the
    tests that edit a stored record start from."""
    copy = tmp_path_factory.mktemp("store_measured") / "run"
    shutil.copytree(profiled, copy)
    for stale in copy.glob(FILE_NAME):
        stale.unlink()
    _diagnose(copy, copy.parent / "cache")
    assert (copy / FILE_NAME).is_file()
    return copy


@pytest.fixture
def measured(measured_once: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(measured_once, copy)
    return copy


def _write_record(store_file: Path, wide: list[float], narrow: list[float]) -> None:
    """Replace the stored what-if's samples (and the figure they give), keeping what it is keyed by."""
    doc = json.loads(store_file.read_text())
    (rec,) = [r for r in doc["records"] if r["kind"] == KIND]
    m = paired_ratio(rec["kind"], rec["key"], ("wide", wide), ("narrow", narrow),
                     MeasurementStore(None).identity(), when=rec["when"])
    new = m.to_dict()
    new.update({k: rec[k] for k in ("capture", "machine", "jax", "jaxlib")})
    # The what-if's record replaced; a fix replayed from the capture keeps its own.
    doc["records"] = [new, *(r for r in doc["records"] if r["kind"] != KIND)]
    store_file.write_text(json.dumps(doc))


def test_the_second_run_reuses_the_stored_measurement_and_times_nothing(run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, doc1 = _diagnose(run, cache)
    store_file = run / FILE_NAME  # profile wrote the folder: the store is kept with the capture
    assert store_file.is_file() and not cache.exists()
    stored = json.loads(store_file.read_text())
    # The what-if's record, beside the replay of the fix it prices (kind replay/fix).
    assert stored["schema"] == SCHEMA and sorted(r["kind"] for r in stored["records"]) == ["replay/fix", KIND]
    (rec,) = [r for r in stored["records"] if r["kind"] == KIND]
    assert len(rec["samples"]["wide"]) == len(rec["samples"]["narrow"]) == rec["reps"] >= 3
    assert rec["spread"]["low"] <= rec["median"] <= rec["spread"]["high"]
    assert "2 measured here, kept in" in first.stderr
    before = (store_file.read_bytes(), store_file.stat().st_mtime_ns)

    second, doc2 = _diagnose(run, cache)
    assert doc2 == doc1 and "reused from" in second.stderr
    assert (store_file.read_bytes(), store_file.stat().st_mtime_ns) == before  # nothing measured, nothing written

    # The store is the source: a record edited by hand is what the next run reports.
    _write_record(store_file, [100.0] * 7, [150.0, 152.0, 149.0, 151.0, 150.5, 153.0, 148.0])
    _, doc3 = _diagnose(run, cache)
    f = _hd004(doc3)
    assert "x1.50 [1.48, 1.53]" in f["message"] and f["extra"]["measured_reps"] == 7
    assert f["extra"]["measured"] == f"measured here {rec['when'][:10]}, 7 runs each, x1.50 [1.48, 1.53]"

    # --remeasure times it again and replaces the record (one record, new samples).
    _, doc4 = _diagnose(run, cache, "--remeasure")
    again = [r for r in json.loads(store_file.read_text())["records"] if r["kind"] == KIND]
    assert len(again) == 1 and again[0]["samples"]["wide"] != [100.0] * 7
    assert "x1.50 [1.48, 1.53]" not in _hd004(doc4)["message"]


@pytest.mark.parametrize("sample", ["engine_b64_original_a", "engine_b64_fixed"])
def test_two_diagnose_runs_of_a_sample_trace_give_identical_json(sample: str, tmp_path: Path) -> None:
    copy = tmp_path / sample
    shutil.copytree(SAMPLES / sample, copy)
    cache = tmp_path / "cache"
    # A short what-if (3 runs each) keeps the test fast; the store makes the second run read it back.
    env = {"HLO_DOCTOR_WHAT_IF_SECONDS": "0"}
    out = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in out:
        r = _run(["diagnose", str(copy), "--format", "json", "-o", str(path)], cache, **env)
        assert r.exit_code == 0, r.output
    assert out[0].read_bytes() == out[1].read_bytes()
    # No marker of hlo-doctor's in a sample trace: nothing is written into it, the cache holds it.
    assert not (copy / FILE_NAME).exists()
    doc = json.loads(out[0].read_text())
    measured = [f for f in doc["findings"] if "measured" in dict(f["extra"])]
    kept = list((cache / "hlo-doctor" / "measurements").glob("*.json")) if cache.exists() else []
    assert len(kept) == (1 if measured else 0)
    for f in measured:  # 3 runs decide nothing: the severity is the model's and the message says so
        assert f["extra"]["measured_decisive"] is False and "from the capture's own figures" in f["message"]
        assert f["severity"] == "medium"


_DAMAGE = ["not json {", '{"schema": "hlo-doctor.measurements/9", "records": []}',
           '{"schema": "hlo-doctor.measurements/1", "records": [{"kind": 1}]}', "NaN", "[" * 100_000, "link"]


def _plant(damage: str, store_file: Path, victim: Path) -> None:
    if damage == "link":
        victim.write_text("not hlo-doctor's\n")
        store_file.symlink_to(victim)
    else:
        store_file.write_text(damage)


@pytest.mark.parametrize("damage", _DAMAGE)
def test_a_damaged_or_hostile_store_file_is_ignored_once_and_replaced_whole(damage: str, run: Path,
                                                                            tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The store itself, on each damage: nothing read from it, one warning naming it, and the next
    record written whole beside it (a link never written through: the cache holds it)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    store_file, victim = run / FILE_NAME, tmp_path / "victim.txt"
    _plant(damage, store_file, victim)
    store = MeasurementStore(run)
    assert store.lookup(KIND, "any key") is None
    assert len(store.warnings) == 1 and str(store_file) in store.warnings[0], store.warnings
    store.record(paired_ratio(KIND, "any key", ("wide", [2.0, 2.1, 1.9]), ("narrow", [1.0, 1.1, 0.9]),
                              store.identity()))
    again = MeasurementStore(run)
    assert again.lookup(KIND, "any key") is not None
    # A link stays (never replaced): every later read notes it again; a file replaced whole reads clean.
    assert again.warnings == (store.warnings if damage == "link" else [])
    if damage == "link":
        assert store_file.is_symlink() and victim.read_text() == "not hlo-doctor's\n"
        assert len(list((cache / "hlo-doctor" / "measurements").glob("*.json"))) == 1
    else:
        assert json.loads(store_file.read_text())["schema"] == SCHEMA


@pytest.mark.parametrize("damage", ["not json {", "link"])
def test_a_damaged_or_hostile_store_is_ignored_with_one_warning(damage: str, run: Path, tmp_path: Path) -> None:
    """Through diagnose (each damage of the store itself above): one note, measured again."""
    cache = tmp_path / "cache"
    store_file = run / FILE_NAME
    victim = tmp_path / "victim.txt"
    _plant(damage, store_file, victim)
    r, doc = _diagnose(run, cache)
    warnings = [line for line in r.stderr.splitlines() if line.startswith("note: ignoring the stored measurements")]
    assert len(warnings) == 1 and str(store_file) in warnings[0]
    assert "measured" in _hd004(doc)["extra"]  # measured again
    if damage == "link":  # never written through: the link and what it points at stay, the cache holds it
        assert store_file.is_symlink() and victim.read_text() == "not hlo-doctor's\n"
        assert len(list((cache / "hlo-doctor" / "measurements").glob("*.json"))) == 1
    else:  # replaced whole by a valid store
        assert json.loads(store_file.read_text())["schema"] == SCHEMA


def test_a_read_only_capture_folder_falls_back_to_the_cache(run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    mode = run.stat().st_mode
    run.chmod(stat.S_IMODE(mode) & ~0o222)  # honoured even for root
    try:
        first, doc1 = _diagnose(run, cache)
        second, doc2 = _diagnose(run, cache)
    finally:
        run.chmod(stat.S_IMODE(mode))
    assert not (run / FILE_NAME).exists()
    (kept,) = (cache / "hlo-doctor" / "measurements").glob("*.json")
    assert str(kept) in first.stderr and "reused from" in second.stderr and doc1 == doc2


def _severity(doc: dict) -> str:
    return str(_hd004(doc)["severity"])


def test_severity_follows_the_measurement_only_where_its_interval_decides(measured: Path, tmp_path: Path) -> None:
    cache, run = tmp_path / "cache", measured
    _, plain = _diagnose(run, cache, "--no-what-if")
    model = _severity(plain)
    assert _hd004(plain)["extra"]["basis"] == "model" and "no what-if: what-if runs are off" in _hd004(plain)["message"]
    store_file = run / FILE_NAME

    # Three runs: too few to decide; the severity stays the model's.
    _write_record(store_file, [100.0] * 3, [40.0, 60.0, 50.0])
    _, few = _diagnose(run, cache)
    assert _severity(few) == model and "too few runs to decide" in _hd004(few)["message"]

    # Seven runs, all far slower: nothing recovered anywhere in the interval, decisively info.
    _write_record(store_file, [100.0] * 7, [5000.0, 5100.0, 4900.0, 5050.0, 4950.0, 5020.0, 4980.0])
    _, slow = _diagnose(run, cache)
    assert _severity(slow) == "info" and _hd004(slow)["extra"]["severity_basis"] == "measured"

    # Seven runs straddling 1 widely: the interval spans band edges, so the model's severity.
    _write_record(store_file, [100.0] * 7, [1.0, 30.0, 60.0, 100.0, 140.0, 170.0, 200.0])
    _, wide = _diagnose(run, cache)
    assert _severity(wide) == model and _hd004(wide)["extra"]["severity_basis"].startswith("model")


def test_a_fix_measured_slower_is_never_promised_as_a_saving(measured: Path, profiled: Path, tmp_path: Path) -> None:
    cache, run = tmp_path / "cache", measured
    src = ["--source-root", str(profiled.parent)]  # the program's folder: eager-widening applies to its astype
    store_file = run / FILE_NAME
    # The stored what-if says the narrower read takes 200x as long: the fix costs more than it recovers.
    _write_record(store_file, [100.0] * 7, [20000.0, 20100.0, 19900.0, 20050.0, 19950.0, 20020.0, 19980.0])
    r, doc = _diagnose(run, cache, *src)
    # The fix that drops the astype makes the argmax read bf16: the what-if's cost is that fix's.
    (promise,) = [p for p in doc["fixes"] if p["fix"] == "eager-widening"]
    if promise["basis"] == "measured":
        # A replay of the capture's programs measured the whole fix here (lint.replay): its figure, not
        # the stored what-if of the argmax alone, is the promise, and the verdict follows its interval;
        # so does the program A/B's (verify's rounds of the program and its fixed copy), which comes first.
        lo, hi = (promise["program_ab"]["interval_us"] if promise["how"] == "program A/B"
                  else promise["replay"]["promise_interval_us"])
        assert promise["verdict"] == ("saving" if lo > 0 else "may cost" if hi > 0 else "no saving expected")
        return
    assert promise["net_high_us"] <= 0 and promise["verdict"] == "no saving expected"
    assert promise["measured"] == [_hd004(doc)["extra"]["measured"]] and promise["cost_us"] > 0
    views = {fmt: _run(["diagnose", str(run), "--format", fmt, *src], cache).stdout for fmt in ("concise", "md")}
    views["pipe"] = _run(["diagnose", str(run), *src], cache).stderr
    for name, text in views.items():
        line = next(x for x in text.splitlines() if f"fix {promise['fix']}" in x)
        assert "no saving expected here" in line and "net ~" not in line, name
        assert "measured here" in line and "7 runs each" in line, name

    # A range that straddles 0 is "may cost", never a net saving either.
    _write_record(store_file, [100.0] * 7, [20.0, 50.0, 90.0, 100.0, 105.0, 20000.0, 30000.0])
    _, doc = _diagnose(run, cache, *src)
    (promise,) = [p for p in doc["fixes"] if p["fix"] == "eager-widening"]
    assert promise["net_low_us"] < 0 < promise["net_high_us"] and promise["verdict"] == "may cost"
    line = next(x for x in _run(["diagnose", str(run), "--format", "concise", *src], cache).stdout.splitlines()
                if f"fix {promise['fix']}" in x)
    assert "may cost here, no saving promised" in line and "net ~" not in line


def test_a_what_if_that_cannot_run_says_why_and_keeps_the_model(run: Path) -> None:
    ctx = load_context(run)
    book = load_rulebook()
    plain = _hd004(diagnose(ctx, book).to_dict())
    other = replace(ctx, what_if=True, versions=(("jax_version", "0.4.1"), ("jaxlib_version", "0.4.1")),
                    measurements=MeasurementStore(run))
    f = _hd004(diagnose(other, book).to_dict())
    assert "no what-if: the capture ran jax 0.4.1" in f["message"] and f["extra"]["basis"] == "model"
    assert f["recoverable_us"] is None and f["extra"]["estimate"] == "not priced"
    assert f["severity"] == plain["severity"] and not (run / FILE_NAME).exists()
    assert os.path.isdir(run)
