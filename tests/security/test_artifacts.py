"""Threat: an artifact of the wrong shape (a Parquet export with damaged samples, a JSON of another kind
or with a field of the wrong type) makes the gate pass a regression or a command end in exit 3.

The gate's judge is the statistics on readable samples: a Parquet candidate whose op got 3x slower
with NaN per-step samples used to be "-100%, improved" (PASS, exit 0); the same values in an
``opstats.json`` were refused. Both containers are now checked by one validator: exit 2 naming the
field. ``report`` checks each JSON document by kind before building a page from it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from threats import REPO

from hlo_doctor.cli import main

RUN = REPO / "sample_traces" / "engine_b64_original_a"
OTHER = REPO / "sample_traces" / "engine_b64_original_b"


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args), env={"GITHUB_ACTIONS": ""})
    return r.exit_code, r.stderr


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyarrow")
    out = tmp_path_factory.mktemp("pq") / "cand.parquet"
    code, err = run("stats", str(OTHER), "--format", "parquet", "--per-step", "-o", str(out))
    assert code == 0, err
    return out


def _rewrite(src: Path, dst: Path, samples: object) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(src)
    times = table.column("time_us").to_numpy().copy()
    ops = table.column("op").to_pylist()
    top = ops[0]
    rows = [i for i, op in enumerate(ops) if op == top]
    column: object
    if samples == "nan":
        times[rows] = np.nan
        column = pa.array(times)
    elif samples == "negative":
        times[rows] = -3 * times[rows]
        column = pa.array(times)
    else:
        column = pa.array([str(t) for t in times])
    table = table.set_column(table.column_names.index("time_us"), "time_us", column)
    pq.write_table(table.replace_schema_metadata(pq.read_table(src).schema.metadata), dst)
    return dst


def test_a_parquet_candidate_with_real_samples_passes(parquet: Path) -> None:
    code, err = run("gate", str(RUN), str(parquet))
    assert code in (0, 1) and "error" not in err, err


@pytest.mark.parametrize("samples", ["nan", "negative", "text"])
def test_unreadable_parquet_samples_never_pass_the_gate(parquet: Path, tmp_path: Path, samples: str) -> None:
    bad = _rewrite(parquet, tmp_path / f"{samples}.parquet", samples)
    code, err = run("gate", str(RUN), str(bad))
    assert code == 2, err
    assert str(bad) in err and "Traceback" not in err and "internal error" not in err


def test_a_parquet_with_a_damaged_steps_blob(parquet: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(parquet)
    meta = dict(table.schema.metadata)
    key = next((k for k in meta if b"steps" in k), None)
    if key is None:
        pytest.skip("this export has no steps blob")
    meta[key] = b"!!not base64 zlib!!"
    bad = tmp_path / "blob.parquet"
    pq.write_table(table.replace_schema_metadata(meta), bad)
    code, err = run("stats", str(bad), "--breakdown")
    assert code == 2 and str(bad) in err, err


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    tmp = tmp_path_factory.mktemp("docs")
    assert run("diagnose", str(RUN), "--format", "json", "-o", str(tmp / "d.json"))[0] == 0
    assert run("gate", str(RUN), str(OTHER), "--format", "json", "-o", str(tmp / "g.json"))[0] in (0, 1)
    return {"diagnosis": json.loads((tmp / "d.json").read_text()), "gate": json.loads((tmp / "g.json").read_text())}


@pytest.mark.parametrize(("kind", "field", "value", "named"), [
    ("diagnosis", "findings", "x", "findings"),
    ("diagnosis", "findings", [{"code": 5}], "findings[0].code"),
    ("diagnosis", "findings", [{"code": "HD002", "time_per_step_us": "fast"}], "time_per_step_us"),
    ("diagnosis", "step_time_us", float("nan"), "step_time_us"),
    ("diagnosis", "step_time_us", -1.0, "step_time_us"),
    ("gate", "ops", {"a": 1}, "ops"),
    ("gate", "ops", [{"key": "k", "baseline_us": "x"}], "ops[0].baseline_us"),
    ("gate", "baseline", "x", "baseline"),
    ("gate", "verdict", 7, "verdict"),
])
def test_report_names_the_field_of_the_wrong_type(documents: dict[str, dict[str, object]], tmp_path: Path,
                                                  kind: str, field: str, value: object, named: str) -> None:
    doc = {**documents[kind], field: value}
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))  # NaN written as JSON's NaN token, as a careless writer would
    code, err = run("report", str(path), "-o", str(tmp_path / "r.html"))
    assert code == 2, err
    assert str(path) in err and f"a {kind} JSON" in err and named in err, err
    assert not (tmp_path / "r.html").exists()


def test_report_names_a_json_of_another_kind(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"schema": "hlo-doctor.sarif/1", "runs": []}))
    code, err = run("report", str(path), "-o", str(tmp_path / "r.html"))
    assert code == 2 and "not a JSON document hlo-doctor wrote" in err, err
