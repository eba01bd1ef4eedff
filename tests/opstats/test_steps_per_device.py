"""Steps per device on multi-chip captures without step marks, judged by xprof's ``hlo_stats``.

libtpu writes one ``/device:TPU:N`` plane per chip; each chip runs the main program once per step.
Without host step marks (and with an empty ``Steps`` line), a step is one execution of the main
program on one device: a 4-chip host running it 5 times has 5 steps, each as long as one chip's
execution start to start, and an op's time per step is its time on one chip.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))

from xspace_builder import (  # noqa: E402
    RealModule,
    SpaceBuilder,
    TpuCore,
    assert_rows_match,
    compile_module,
    table_rows,
    xprof_rows,
)

from hlo_doctor.opstats import load_opstats  # noqa: E402
from hlo_doctor.trace import find_xplanes  # noqa: E402

PROGRAM_ID = 12190760917235803885
STEP_NS = 800_000.0
RUNS = 5


def _layer(x: jnp.ndarray, w: jnp.ndarray) -> jnp.ndarray:
    return jnp.tanh(x @ w) + 1.0


@pytest.fixture(scope="module")
def layer() -> RealModule:
    return compile_module(_layer, jnp.ones((8, 32), jnp.float32), jnp.ones((32, 32), jnp.float32))


class _OpsOnlyCore(TpuCore):
    """A chip whose capture holds XLA Ops but no XLA Modules events (no execution ids): each run is
    then found from its first op's events."""

    def _event(self, line: object, *args: object, **kwargs: object) -> None:
        if line is not self.modules:
            super()._event(line, *args, **kwargs)  # type: ignore[arg-type]


def _chips(space: SpaceBuilder, layer: RealModule, chips: int, *, shared_run_ids: bool,
           skew_ns: float = 3_000.0, module_events: bool = True) -> None:
    """``chips`` TPU planes, each running ``layer`` RUNS times, no step marks; chip k starts its
    executions ``k * skew_ns`` after chip 0 (chips are not in lockstep)."""
    space.add_module(layer, PROGRAM_ID)
    for chip in range(chips):
        core = TpuCore(space, chip) if module_events else _OpsOnlyCore(space, chip)
        for i in range(RUNS):
            ops = [(op.name, (20.0 + 5.0 * k) * 1000) for k, op in enumerate(layer.ops)]
            run_id = i if shared_run_ids else chip * 1000 + i
            core.run(layer, PROGRAM_ID, i * STEP_NS + chip * skew_ns, ops, run_id=run_id)


@pytest.mark.parametrize("chips", [4, 8])
@pytest.mark.parametrize(("shared_run_ids", "module_events"), [(True, True), (False, True), (False, False)],
                         ids=["shared-run-ids", "run-ids-per-chip", "no-module-events"])
def test_steps_are_per_device(tmp_path: Path, layer: RealModule, chips: int, shared_run_ids: bool,
                              module_events: bool) -> None:
    # Without module events (no execution ids), the first op's events of every chip were taken
    # as the runs of one device: 4 chips x 5 runs read as 20 steps, each op's time divided by 4.
    space = SpaceBuilder()
    _chips(space, layer, chips, shared_run_ids=shared_run_ids, module_events=module_events)
    xplane = space.write(tmp_path / "run")
    expected = xprof_rows(find_xplanes(xplane), tmp_path)
    stats = load_opstats(xplane)
    assert_rows_match(expected, table_rows(stats.table))
    assert stats.step_source == "module-executions"
    assert stats.num_steps == RUNS
    # Each chip's steps, start to start; the last one ends with the chip's last op.
    assert len(stats.step_times_us) == RUNS * chips
    assert sorted(stats.step_times_us)[chips:] == pytest.approx([STEP_NS / 1e3] * ((RUNS - 1) * chips))
    # xprof's occurrences count every chip; per step and device each op ran once.
    assert all(occ == RUNS * chips for occ, _ in expected.values())
    assert set(stats.table["devices"]) == {chips}
    assert stats.table["runs_per_step"].tolist() == pytest.approx([1.0] * len(stats.table))
    first = layer.ops[0].name
    row = stats.table[stats.table["op"].astype(str) == first].iloc[0]
    assert row["time_per_step_us"] == pytest.approx(20.0)


def test_two_hosts_of_four_chips(tmp_path: Path, layer: RealModule) -> None:
    run = tmp_path / "run"
    for host in ("tpu-host-0", "tpu-host-1"):
        space = SpaceBuilder(host)
        _chips(space, layer, 4, shared_run_ids=True)
        space.write(run)
    expected = xprof_rows(find_xplanes(run), tmp_path)
    stats = load_opstats(run)
    assert_rows_match(expected, table_rows(stats.table))
    assert stats.num_steps == RUNS
    assert set(stats.table["devices"]) == {8}
    assert stats.table["runs_per_step"].tolist() == pytest.approx([1.0] * len(stats.table))


def test_stats_header_says_per_device_and_no_cpu_note_on_tpu(tmp_path: Path, layer: RealModule) -> None:
    from click.testing import CliRunner

    from hlo_doctor.cli import main

    space = SpaceBuilder()
    _chips(space, layer, 4, shared_run_ids=False)
    xplane = space.write(tmp_path / "run")
    result = CliRunner().invoke(main, ["stats", str(xplane), "--top", "3"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"{RUNS} steps per device (4 devices) from executions of the main module" in text
    assert "XLA:CPU" not in text
