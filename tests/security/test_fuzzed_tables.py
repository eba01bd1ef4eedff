"""Threat: a hand-edited, damaged or hostile op-stats table makes the gate pass or diagnose print nonsense.

Every loaded table and value goes through one check (``hlo_doctor/opstats/validate.py``): types,
nulls, 64-bit range, finite and non-negative numbers. Anything else is exit 2 naming the file and the
field; never exit 0 (failing open) and never exit 3 (a traceback). A seeded generator damages the
fields of a real export one at a time (hypothesis is not a dependency).
"""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.core.errors import InputError
from hlo_doctor.opstats import from_json

REPO = Path(__file__).resolve().parents[2]
EXPORT = REPO / "sample_traces" / "engine_b64_original_a" / "opstats.json"
DOC: dict[str, Any] = json.loads(EXPORT.read_text())

# Field paths -> values no capture writes there. Each named case is one the tool once let through.
NAMED = {
    "text program_id": (("rows", 0, "program_id"), "62", "rows[0].program_id: '62' is not an integer"),
    "program_id past 64 bits": (("rows", 0, "program_id"), 2**64, "rows[0].program_id: 18446744073709551616"),
    "negative program_id": (("per_step", "rows", 0, 2), -1, "per_step.rows[0].program_id: -1 is out of range"),
    "missing module": (("rows", 0, "module"), KeyError, "rows[0].module: missing"),
    "missing op": (("rows", 0, "op"), KeyError, "rows[0].op: missing"),
    "a 10^40 integer": (("rows", 0, "occurrences"), 10**40, "rows[0].occurrences"),
    "NaN time": (("rows", 0, "total_time_us"), math.nan, "rows[0].total_time_us: nan is not finite"),
    "inf time per step": (("rows", 0, "time_per_step_us"), math.inf, "rows[0].time_per_step_us: inf is not finite"),
    "negative num_steps": (("num_steps",), -3, "num_steps: -3"),
    "negative bytes_written": (("rows", 0, "bytes_written"), -5, "rows[0].bytes_written: -5"),
    "negative pct_of_step": (("rows", 0, "pct_of_step"), -1910.0, "rows[0].pct_of_step: -1910.0 is negative"),
    "NaN step time": (("step_time_us",), math.nan, "step_time_us: nan"),
    "negative step times": (("step_times_us", 0), -1.0, "step_times_us[0]: -1.0 is negative"),
    "NaN per-step sample": (("per_step", "rows", 0, 5), math.nan, "per_step.rows[0].time_us: nan"),
    "text for a time": (("rows", 0, "total_time_us"), "abc", "rows[0].total_time_us: 'abc' is not a number"),
    "true for a count": (("rows", 0, "occurrences"), True, "rows[0].occurrences: True is not an integer"),
    "rows as an object": (("rows",), {"a": 1}, "rows: expected a list"),
    "per-step row too short": (("per_step", "rows", 0), [0, "m"], "per_step.rows[0]: expected a list of 6"),
    "run as a list": (("run",), [1, 2], "run: expected an object"),
}


def damaged(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(DOC)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is KeyError:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def write(tmp_path: Path, doc: Any, name: str = "cand.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, allow_nan=True))
    return path


@pytest.mark.parametrize("case", list(NAMED))
def test_named_damage_is_an_input_error_naming_the_field(case: str) -> None:
    path, value, field = NAMED[case]
    with pytest.raises(InputError) as err:
        from_json(json.dumps(damaged(path, value), allow_nan=True), origin="cand.json")
    assert err.value.what.startswith("cand.json: malformed opstats export: ")
    assert field in err.value.what


@pytest.mark.parametrize("case", ["NaN time", "negative num_steps", "negative bytes_written", "program_id past 64 bits",
                                  "a 10^40 integer", "missing module"])
def test_gate_and_diagnose_never_fail_open(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cand = write(tmp_path, damaged(*NAMED[case][:2]))
    for args in (["gate", str(EXPORT), str(cand)], ["gate", str(cand), str(EXPORT)], ["diagnose", str(cand)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output)
        assert "cand.json" in r.stderr and "Traceback" not in r.stderr
        assert "recoverable" not in r.stderr


def _random_value(rng: random.Random) -> Any:
    return rng.choice([None, -1, -1e-9, 2**63, 10**40, math.nan, math.inf, -math.inf, "", "x", True, [], {}, 1.5])


def test_seeded_fuzz_of_every_field_never_escapes_as_another_exception() -> None:
    """500 damaged exports: each loads cleanly or raises InputError; never a bare exception."""
    rng = random.Random(14)
    columns = list(DOC["rows"][0])
    top = ["num_steps", "step_time_us", "step_times_us", "rows", "per_step", "run", "compile_events", "versions"]
    outcomes = {"input error": 0, "loaded": 0}
    for _ in range(500):
        doc = copy.deepcopy(DOC)
        # Top-level damage last: it may replace the lists the other kinds reach into.
        for where in sorted((rng.random() for _ in range(rng.randint(1, 3))), reverse=False):
            if where < 0.6:
                row = rng.choice(doc["rows"])
                row[rng.choice(columns)] = _random_value(rng)
            elif where < 0.8:
                sample = rng.choice(doc["per_step"]["rows"])
                sample[rng.randrange(len(sample))] = _random_value(rng)
            else:
                doc[rng.choice(top)] = _random_value(rng)
        try:
            stats = from_json(json.dumps(doc, allow_nan=True), origin="fuzz.json")
        except InputError as exc:
            assert exc.what.startswith("fuzz.json: ")
            outcomes["input error"] += 1
            continue
        # What loads is sane: every number finite and non-negative.
        numeric = stats.table.select_dtypes("number")
        assert bool((numeric.fillna(0) >= 0).all().all())
        assert stats.num_steps >= 0 and math.isfinite(stats.step_time_us)
        outcomes["loaded"] += 1
    assert outcomes["input error"] > 400


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"format": "hlo-doctor.opstats/1", "rows": ' + "[" * 5000 + "]" * 5000 + "}"])
def test_deeply_nested_json_is_an_input_error(text: str, tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(text)
    for args in (["gate", str(EXPORT), str(path)], ["diagnose", str(path)], ["stats", str(path)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "nested too deeply" in r.stderr, (args, r.output)


def test_an_untouched_export_still_loads() -> None:
    stats = from_json(EXPORT.read_text(), origin=str(EXPORT))
    assert len(stats.table) == len(DOC["rows"]) and stats.num_steps == DOC["num_steps"]


def test_a_null_program_id_is_unknown_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder itself writes null for an op the trace gave no program id: it loads, and nothing crashes."""
    monkeypatch.chdir(tmp_path)
    doc = damaged(("rows", 0, "program_id"), None)
    doc["per_step"]["rows"][0][2] = None
    cand = write(tmp_path, doc)
    assert from_json(cand.read_text()).table["program_id"].iloc[0] is None
    for args in (["gate", str(EXPORT), str(cand)], ["diagnose", str(cand)], ["stats", str(cand)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code in (0, 1) and "Traceback" not in r.output, (args, r.output)


def test_uint64_program_ids_load_exactly() -> None:
    doc = damaged(("rows", 0, "program_id"), 2**64 - 1)
    assert from_json(json.dumps(doc)).table["program_id"].iloc[0] == 2**64 - 1
