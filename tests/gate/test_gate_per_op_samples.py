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
