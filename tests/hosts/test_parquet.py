"""The Parquet export: the per-step matrix as columns pandas reads, the rest of the export beside it,
read back (and by the gate) as the JSON export with --per-step is; without pyarrow, one line naming
the extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from test_pod_faults import cli_result
from test_pod_tables import cli

from hlo_doctor.opstats import from_json, load_opstats, to_json
from hlo_doctor.opstats.schema import PER_STEP_COLUMNS


def test_parquet_holds_the_per_step_matrix_and_reads_back_as_the_json_export(tpu_logdir: Path, tmp_path: Path) -> None:
    stats = load_opstats(tpu_logdir)
    out = tmp_path / "pod.parquet"
    cli("stats", str(tpu_logdir), "--format", "parquet", "-o", str(out), "--jobs", "2")
    assert out.read_bytes()[:4] == b"PAR1"
    # pandas reads the samples natively: one row per step and op, the ids as unsigned 64-bit.
    frame = pd.read_parquet(out)
    assert tuple(frame.columns) == PER_STEP_COLUMNS and len(frame) == len(stats.per_step) > 0
    assert str(frame["program_id"].dtype) == "uint64"
    assert frame["program_id"].max() > 2**63  # the layer's id, above int64's range
    assert frame["time_us"].tolist() == stats.per_step["time_us"].tolist()
    # Everything the JSON export with --per-step holds, read back the same.
    back = load_opstats(out)
    json_back = from_json(to_json(stats, per_step=True, compact=True))
    # Everything but which file each was read from (the export names its own capture).
    def held(o: object) -> dict:
        doc = json.loads(to_json(o, per_step=True, compact=True))  # type: ignore[arg-type]
        doc.pop("capture", None)
        return doc

    assert held(back) == held(json_back)
    pd.testing.assert_frame_equal(back.per_step, json_back.per_step)
    assert back.breakdown is not None and back.breakdown == stats.breakdown
    # -o FILE.parquet alone says Parquet too.
    named = tmp_path / "named.parquet"
    cli("stats", str(tpu_logdir), "-o", str(named))
    assert load_opstats(named).per_step.equals(back.per_step)


def test_gate_reads_a_parquet_export_with_its_samples(tpu_logdir: Path, tmp_path: Path) -> None:
    base = tmp_path / "base.parquet"
    cli("stats", str(tpu_logdir), "--format", "parquet", "-o", str(base))
    doc = json.loads(cli("gate", str(base), str(tpu_logdir), "--format", "json"))
    assert doc["verdict"] == "pass"
    assert not any("no per-op per-step samples" in n for n in doc["notes"])


def test_parquet_without_pyarrow_names_the_extra(tpu_logdir: Path, tmp_path: Path) -> None:
    # A 'pyarrow' that cannot be imported shadows the installed one.
    (tmp_path / "pyarrow").mkdir()
    (tmp_path / "pyarrow" / "__init__.py").write_text("raise ImportError('pyarrow is not installed here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "hlo_doctor.cli", "stats", str(tpu_logdir), "--jobs", "1",
                           "--format", "parquet", "-o", str(tmp_path / "x.parquet")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip().splitlines() == [
        "error: Parquet needs the 'pyarrow' package, which is not installed - pip install "
        "'hlo-doctor[parquet]' (or write --format json)"]
    assert not (tmp_path / "x.parquet").exists()


def test_parquet_to_stdout_is_refused(tpu_logdir: Path) -> None:
    code, out, err = cli_result("stats", str(tpu_logdir), "--format", "parquet")
    assert code == 2 and not out
    assert err.strip().splitlines() == ["error: --format parquet writes a file, not stdout - pass -o FILE.parquet"]
