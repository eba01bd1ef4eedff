"""Step times held as one float64 array read as the tuple of floats they were: length, truth, items,
iteration, equality with tuples and lists, pickling (a worker's totals), numpy without a copy; and
what a capture's table holds."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from hlo_doctor.opstats import load_opstats
from hlo_doctor.opstats.step_times import StepTimes, float_list

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "gpu_h200_original"


def test_it_reads_as_the_tuple_of_its_floats() -> None:
    values = (1884.25, 0.1 + 0.2, 7.0, 1e-300)
    times = StepTimes(values)
    assert len(times) == 4 and bool(times) and not StepTimes()
    assert times == values and values == times and times == list(values) and times == StepTimes(list(values))
    assert times != values[:3] and times != (*values[:3], 8.0) and times != "1884.25"
    assert [type(t) for t in times] == [float] * 4 and tuple(times) == values
    assert times[1] == values[1] and type(times[-1]) is float and times[1:3] == values[1:3]
    assert float_list(times) == list(values) and float_list(values) == list(values)
    with pytest.raises(TypeError):
        hash(times)


def test_it_is_one_read_only_array_shared_not_copied() -> None:
    source = np.array([3.0, 1.0, 2.0])
    times = StepTimes(source)
    source[0] = 99.0  # the caller's array is its own
    assert times[0] == 3.0
    held = np.asarray(times)
    assert np.asarray(times, dtype=float) is held and not held.flags.writeable
    assert np.asarray(times, dtype=np.float32).dtype == np.float32
    assert StepTimes(times) == times and np.asarray(StepTimes(times)) is held
    back = pickle.loads(pickle.dumps(times))
    assert back == times and isinstance(back, StepTimes)
    assert "3.0" in repr(times) and "more" in repr(StepTimes(range(20)))


def test_a_capture_keeps_its_step_times_as_one_array() -> None:
    stats = load_opstats(SAMPLE)
    assert isinstance(stats.step_times_us, StepTimes) and len(stats.step_times_us) == stats.num_steps
    assert stats.step_time_us == pytest.approx(sum(stats.step_times_us) / len(stats.step_times_us))
