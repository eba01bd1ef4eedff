"""Exports sized to what they hold: the table by default, the per-step samples with --per-step, and
both read back as they were written (the gate reads the samples)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_pod_tables import cli

from hlo_doctor.opstats import OpStats, from_json, load_opstats, to_json
from hlo_doctor.opstats.breakdown import HOST_KINDS, StepTable


def test_default_export_is_the_table_and_per_step_is_opt_in(tpu_logdir: Path) -> None:
    stats = load_opstats(tpu_logdir)
    table = json.loads(to_json(stats, per_step=False, compact=True))
    assert not {"per_step", "step_times_us"} & set(table) and table["per_step_written"] is False
    assert "steps" not in table["breakdown"] and table["breakdown"]["summary"]["devices"]
    assert len(table["rows"]) == len(stats.table)
    back = from_json(json.dumps(table))
    pd.testing.assert_frame_equal(back.table, stats.table)
    assert back.per_step.empty and back.step_times_us == () and back.breakdown is None
    assert back.step_time_us == stats.step_time_us and back.num_steps == stats.num_steps
    # With the samples: everything read back as it was.
    full = from_json(to_json(stats, per_step=True, compact=True))
    pd.testing.assert_frame_equal(full.per_step, stats.per_step)
    assert full.step_times_us == stats.step_times_us
    assert full.breakdown is not None and stats.breakdown is not None
    assert full.breakdown.steps == stats.breakdown.steps and full.breakdown.lines == stats.breakdown.lines


def test_the_export_grows_with_the_ops_not_the_steps(large_stats: OpStats, large_logdir: Path) -> None:
    """The large host holds thousands of steps per chip: its export is the size of a small host's."""
    small = load_opstats(next(large_logdir.glob("plugins/profile/*/tpu-host-0.xplane.pb")))
    assert large_stats.num_steps > 50 * small.num_steps
    large_size = len(to_json(large_stats, per_step=False, compact=True))
    assert large_size < 2 * len(to_json(small, per_step=False, compact=True)) + 50_000
    # What --per-step adds: a sample per op and step, a slice per device and step.
    assert len(large_stats.per_step) > 40 * large_size / 1_000 and large_stats.breakdown is not None
    assert len(large_stats.breakdown.steps) > 100 * len(small.breakdown.steps)  # type: ignore[union-attr]


def test_gate_reads_exports_with_and_without_samples(tpu_logdir: Path, tmp_path: Path) -> None:
    base, bare = tmp_path / "base.json", tmp_path / "bare.json"
    cli("stats", str(tpu_logdir), "--format", "json", "--per-step", "-o", str(base))
    cli("stats", str(tpu_logdir), "--format", "json", "-o", str(bare))
    with_samples = json.loads(cli("gate", str(base), str(tpu_logdir), "--format", "json"))
    without = json.loads(cli("gate", str(bare), str(tpu_logdir), "--format", "json"))
    assert with_samples["verdict"] == without["verdict"] == "pass"
    assert not any("no per-op per-step samples" in n for n in with_samples["notes"])
    assert any("no per-op per-step samples" in n for n in without["notes"])


def test_the_breakdown_holds_its_slices_as_columns(large_stats: OpStats) -> None:
    """Thousands of slices per device: one block of arrays per device, slice objects only on demand."""
    b = large_stats.breakdown
    assert b is not None
    table = b.table
    assert len(table.blocks) == len(b.windows) and len(table) > 1_000
    held = sum(getattr(blk, name).nbytes for blk in table.blocks
               for name in ("step", "start_us", "wall_us", "busy_us", "op_us", "host_us", "idle_by_kind"))
    assert held <= 120 * len(table)
    slices = list(table)
    assert len(slices) == len(table) and slices[-1] == table[-1] and slices[:3] == list(table[:3])
    assert StepTable.of(slices) == table and table.records()[5]["idle_us"] == slices[5].idle_us
    assert b.wall_us == pytest.approx(sum(s.wall_us for s in slices) / len(slices), rel=1e-12)
    assert b.idle_by_kind() == pytest.approx(
        {k: sum(s.idle_by_kind[k] for s in slices) / len(slices) for k in HOST_KINDS}, rel=1e-12)
