"""Each op's per-step samples (``gate.match.per_op_samples``), taken by codes and one bincount, are the
pandas group-by they replace: the same keys in the same order, the same steps, the same sums (pandas
sums a group with compensation: equal to within 1e-12 where a cell holds several rows; equal where a
cell holds one, as a capture's usually does). The gate's JSON on real captures is judged in the other
files of this folder."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hlo_doctor.gate.match import per_op_samples


class _Stats:
    def __init__(self, per_step: pd.DataFrame) -> None:
        self.per_step = per_step


def _group_by(per_step: pd.DataFrame) -> dict[str, np.ndarray]:
    steps = sorted(per_step["step"].unique())
    pivot = per_step.groupby(["canonical_key", "step"])["time_us"].sum().unstack("step").reindex(columns=steps)
    return {str(key): row.to_numpy(dtype=float) for key, row in pivot.fillna(0.0).iterrows()}


@pytest.mark.parametrize("seed", range(40))
def test_per_op_samples_are_the_group_by(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 600))
    keys = rng.choice(["jit_step|fusion|f32[8,4]", "jit_step|copy|bf16[8]", "jit_b|convert", "z", None], n)
    frame = pd.DataFrame({
        "step": rng.integers(-1, 9, n).astype(np.int64),
        "canonical_key": pd.array(keys, dtype="string"),
        "time_us": np.where(rng.random(n) < 0.05, np.nan, rng.random(n) * 1e3),
    })
    got, want = per_op_samples(_Stats(frame)), _group_by(frame)
    assert list(got) == list(want)
    for key, row in want.items():
        np.testing.assert_allclose(got[key], row, rtol=1e-12, atol=0)
    # One row per (key, step), as a capture's per-step table: the sums are the values themselves.
    single = frame.dropna(subset=["canonical_key"]).drop_duplicates(["canonical_key", "step"])
    got, want = per_op_samples(_Stats(single)), _group_by(single)
    assert list(got) == list(want) and all(np.array_equal(got[k], want[k]) for k in want)


def test_no_samples_without_a_per_step_table() -> None:
    empty = pd.DataFrame({"step": pd.Series([], dtype="int64"), "canonical_key": pd.Series([], dtype="string"),
                          "time_us": pd.Series([], dtype="float64")})
    assert per_op_samples(_Stats(empty)) == {}


_REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sample", ["engine_b64_original_a", "gpu_h200_original", "tpu_v5e_original"])
def test_a_capture_read_here_gives_its_samples_from_its_sums_as_its_frame_gives_them(sample: str) -> None:
    """A table built from a capture's sums defers its per-step frame (millions of rows on a long
    capture); the gate takes the samples from the sums. They are the frame's, bit for bit, and
    reading them builds no frame; the frame built afterwards is the one the sums stand for."""
    import dataclasses

    from hlo_doctor.hosts.capture import PodOptions, read_capture

    stats, _ = read_capture(_REPO / "sample_traces" / sample, PodOptions())
    assert not stats.per_step_built
    fast = per_op_samples(stats)
    assert not stats.per_step_built and fast
    frame = stats.per_step
    assert stats.per_step_built and stats.per_step is frame and len(frame) == stats.num_steps * len(stats.table)
    slow = per_op_samples(dataclasses.replace(stats, per_step_data=frame))
    assert list(fast) == list(slow)
    assert all(fast[k].tobytes() == slow[k].tobytes() for k in slow)
