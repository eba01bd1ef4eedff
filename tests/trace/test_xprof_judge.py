"""xprof is the judge: on device traces laid out as xprof's own tests lay them out, xprof's
``hlo_stats`` returns rows and hlo-doctor's op-stats table matches them row for row.

Each trace is built with :mod:`xspace_builder` (real HLO modules compiled on CPU, TPU/GPU planes as
libtpu and CUPTI write them). The match is on (program id, op name): occurrences and total time.
xprof converts a copy of the file (it writes cache files beside its input).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from xspace_builder import (
    GpuDevice,
    RealModule,
    Rows,
    SpaceBuilder,
    TpuCore,
    assert_rows_match,
    compile_module,
    table_rows,
    xprof_rows,
)

from hlo_doctor.opstats import OpStats, from_json, load_opstats, to_csv, to_json

# A libtpu program id from xprof's own test trace (tpu_inference_2.xplane.pb): above 2**63.
BIG_ID = 12190760917235803885
RECOMPILED_ID = 17293822569102704642

def _sample(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    # The reference engine's sampler shape: a widening argmax and the input returned (a copy).
    return jnp.argmax(logits.astype(jnp.float32), axis=-1), logits


def _layer(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w) + 1.0


@pytest.fixture(scope="module")
def sampler() -> RealModule:
    return compile_module(_sample, jnp.ones((8, 256), jnp.bfloat16))


@pytest.fixture(scope="module")
def layer() -> RealModule:
    return compile_module(_layer, jnp.ones((8, 32), jnp.float32), jnp.ones((32, 32), jnp.float32))


def judge(xplane: Path, tmp_path: Path) -> tuple[OpStats, Rows]:
    """Both tables on one file; assert xprof has rows and hlo-doctor matches them row for row."""
    expected = xprof_rows(xplane, tmp_path)
    assert expected, "xprof's hlo_stats returned no rows: the built trace is not laid out as xprof reads it"
    stats = load_opstats(xplane)
    assert_rows_match(expected, table_rows(stats.table))
    return stats, expected


def _ops(module: RealModule, base_us: float) -> list[tuple[str, float]]:
    # Op durations in ns: base_us, base_us + 7 us, ... so every op has its own total.
    return [(op.name, (base_us + 7.0 * k) * 1000) for k, op in enumerate(module.ops)]


def _steps(core: TpuCore, module: RealModule, program_id: int, steps: int, *, first_run: int = 0,
           start_ns: float = 0.0, step_ns: float = 100_000.0, jitter_ns: tuple[float, ...] = (0.0,),
           **run_kwargs: Any) -> float:
    t = start_ns
    for i in range(steps):
        # The module may start a little after the step mark (host dispatch), by a varying amount.
        core.run(module, program_id, t + jitter_ns[i % len(jitter_ns)], _ops(module, 10.0 + i),
                 run_id=first_run + i, **run_kwargs)
        core.step(first_run + i, t, step_ns)
        t += step_ns
    return t


# Each case builds one trace into ``root`` and returns its xplane (scripts reuse them for tables).

def case_program_ids_above_2_63(root: Path, sampler: RealModule, layer: RealModule) -> Path:
    space = SpaceBuilder()
    space.add_module(sampler, BIG_ID)
    _steps(TpuCore(space, 0), sampler, BIG_ID, 3)
    return space.write(root)


def case_recompile(root: Path, sampler: RealModule, layer: RealModule) -> Path:
    # The same op text under two program ids: metadata is per id, so the ops stay apart.
    space = SpaceBuilder()
    space.add_module(sampler, BIG_ID)
    space.add_module(sampler, RECOMPILED_ID)
    core = TpuCore(space, 0)
    end = _steps(core, sampler, BIG_ID, 2)
    _steps(core, sampler, RECOMPILED_ID, 3, first_run=2, start_ns=end)
    return space.write(root)


def case_device_clock(root: Path, sampler: RealModule, layer: RealModule) -> Path:
    # Event offsets/durations on the host clock are off; device_offset_ps/device_duration_ps are right.
    space = SpaceBuilder()
    space.add_module(sampler, BIG_ID)
    _steps(TpuCore(space, 0), sampler, BIG_ID, 3, device_clock_skew_ns=5_000.0)
    return space.write(root)


def case_aggregated(root: Path, sampler: RealModule, layer: RealModule) -> Path:
    space = SpaceBuilder()
    space.add_module(sampler, BIG_ID)
    core = TpuCore(space, 0)
    for k, op in enumerate(sampler.ops):
        core.aggregated_op(sampler, BIG_ID, op.name, total_ns=(40.0 + k) * 1000, occurrences=4)
    core.step(0, 0.0, 400_000.0)
    return space.write(root)


def case_device_steps_only(root: Path, sampler: RealModule, layer: RealModule) -> Path:
    # No host plane at all: the device Steps line is the only step boundary. Each module run starts a
    # varying time after its step mark, so steps from module executions would not be 1800 us.
    space = SpaceBuilder()
    space.add_module(layer, BIG_ID)
    _steps(TpuCore(space, 0), layer, BIG_ID, 4, step_ns=1_800_000.0,
           jitter_ns=(20_000.0, 155_000.0, 40_000.0, 90_000.0))
    return space.write(root)


def case_two_cores(root: Path, sampler: RealModule, layer: RealModule) -> Path:
    space = SpaceBuilder()
    space.add_module(layer, BIG_ID)
    for ordinal in (0, 1):
        _steps(TpuCore(space, ordinal), layer, BIG_ID, 3)
    return space.write(root)


def case_gpu(root: Path, sampler: RealModule, layer: RealModule) -> Path:
    space = SpaceBuilder()
    space.add_module(sampler, 659683)
    space.add_module(layer, 453212)
    gpu = GpuDevice(space, 0)
    t = 0.0
    for _ in range(3):
        for module, pid in ((layer, 453212), (sampler, 659683)):
            for k, op in enumerate(module.ops):
                duration = (5.0 + 3 * k) * 1000
                gpu.kernel(module, pid, op.name, t, duration, memcpy=op.name.startswith("copy"))
                t += duration + 2_000
    return space.write(root)


def test_program_ids_above_2_63(tmp_path: Path, sampler: RealModule, layer: RealModule) -> None:
    stats, expected = judge(case_program_ids_above_2_63(tmp_path / "run", sampler, layer), tmp_path)
    assert {pid for pid, _ in expected} == {BIG_ID}
    assert set(stats.table["module"].astype(str)) == {sampler.name}
    # The id survives the exports exactly (a float or an int64 would not hold it).
    again = from_json(to_json(stats))
    assert [int(p) for p in again.table["program_id"]] == [BIG_ID] * len(expected)
    assert str(BIG_ID) in to_csv(stats.table)


def test_recompile_under_a_second_program_id(tmp_path: Path, sampler: RealModule, layer: RealModule) -> None:
    stats, expected = judge(case_recompile(tmp_path / "run", sampler, layer), tmp_path)
    assert {pid for pid, _ in expected} == {BIG_ID, RECOMPILED_ID}
    assert all(occ == 2 for (pid, _), (occ, _) in expected.items() if pid == BIG_ID)
    assert set(stats.table["module"].astype(str)) == {sampler.name}


def test_device_clock_stats(tmp_path: Path, sampler: RealModule, layer: RealModule) -> None:
    judge(case_device_clock(tmp_path / "run", sampler, layer), tmp_path)


def test_aggregated_occurrences(tmp_path: Path, sampler: RealModule, layer: RealModule) -> None:
    stats, expected = judge(case_aggregated(tmp_path / "run", sampler, layer), tmp_path)
    assert all(occ == 4 for occ, _ in expected.values())
    # No XLA Modules event encloses aggregated ops: the module is named from the program id
    # (the metadata plane's module(program_id)).
    assert set(stats.table["module"].astype(str)) == {sampler.name}


def test_device_steps_line_without_host_step_marks(tmp_path: Path, sampler: RealModule,
                                                   layer: RealModule) -> None:
    stats, _ = judge(case_device_steps_only(tmp_path / "run", sampler, layer), tmp_path)
    assert stats.num_steps == 4
    assert list(stats.step_times_us) == pytest.approx([1800.0] * 4)


def test_two_cores(tmp_path: Path, sampler: RealModule, layer: RealModule) -> None:
    stats, expected = judge(case_two_cores(tmp_path / "run", sampler, layer), tmp_path)
    assert all(occ == 6 for occ, _ in expected.values())
    assert set(stats.table["devices"]) == {2}
    assert stats.num_steps == 3


def test_gpu_plane_as_cupti_writes_it(tmp_path: Path, sampler: RealModule, layer: RealModule) -> None:
    stats, expected = judge(case_gpu(tmp_path / "run", sampler, layer), tmp_path)
    assert {pid for pid, _ in expected} == {453212, 659683}
    assert stats.backend == "gpu"
    assert stats.device_kind == "NVIDIA H200"
