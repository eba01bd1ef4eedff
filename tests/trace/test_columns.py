"""The op-event columns (``trace/columns.py``): a line in order and the same line shuffled give the same
columns (a line already in order skips the sort); ``unique_inverse``, ``unique_values`` and ``searchsorted``
give numpy's answers; a line's integer stats kept as rows read as the dict of them does; ``counts`` is
``np.bincount``; execution ids and occurrences are kept in the narrowest type, joined in the widest.
Reading a capture does not load pandas: it is loaded where the table is first built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hlo_doctor.trace.columns import OpColumns, counts, searchsorted, unique_inverse, unique_values
from hlo_doctor.trace.wire import OwnStats


def _columns(order: np.ndarray, start: np.ndarray, duration: np.ndarray) -> list[np.ndarray]:
    cols = OpColumns()
    n = len(start)
    codes = np.arange(n, dtype=np.int64)
    cols.add("h", "d", codes[order] % 3, codes[order] % 5, codes[order], start[order], duration[order],
             codes[order] % 7, codes[order] % 2 + 1)
    return [column[0] for column in cols.chunks]  # the line's arrays, codes and times, as added


@pytest.mark.parametrize("seed", [0, 1])
def test_a_line_in_order_and_shuffled_give_the_same_columns(seed: int) -> None:
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 50, 400)).astype(np.float64)  # ties: the longer event first
    duration = (rng.permutation(400) + 1).astype(np.float64)  # distinct: one order of the events
    sorted_order = np.lexsort((-duration, start))
    in_order = _columns(sorted_order, start, duration)
    shuffled = _columns(rng.permutation(400), start, duration)
    for a, b in zip(in_order, shuffled, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("values", [[5, 3, 5, 9, -2, 3], [1 << 40, 7, 1 << 40], [0], list(range(100, 0, -1))])
def test_unique_inverse_is_numpys(values: list[int]) -> None:
    a = np.array(values, np.int64)
    got, want = unique_inverse(a), np.unique(a, return_inverse=True)
    assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # The caller's array as scratch (shifted in place, where the range is small): the same answer.
    lost = unique_inverse(a.copy(), scratch=True)
    assert np.array_equal(lost[0], want[0]) and np.array_equal(lost[1], want[1])


@pytest.mark.parametrize("values", [[5, 3, 5, 9, -2, 3], [1 << 40, 7, 1 << 40], [0], list(range(100, 0, -1))])
def test_unique_values_is_numpys(values: list[int]) -> None:
    a = np.array(values, np.int64)
    got, want = unique_values(a), np.unique(a)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_is_numpys(seed: int, side: str) -> None:
    # Events (many, sorted or not, with ties and values on the boundaries) against boundaries (few).
    rng = np.random.default_rng(seed)
    bounds = np.sort(rng.integers(0, 1000, int(rng.integers(1, 300)))).astype(np.float64)
    events = np.concatenate([rng.integers(-10, 1010, 5000).astype(np.float64), bounds])
    if seed % 2 == 0:
        events = np.sort(events)
    for haystack, needles in ((bounds, events), (np.zeros(0), events), (bounds, events[:10])):
        got, want = searchsorted(haystack, needles, side=side), np.searchsorted(haystack, needles, side=side)
        assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(4))
def test_integer_stats_as_rows_read_as_their_dict(seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = {7: "group_id", 9: "program_id", 11: "group_id"}  # two stat ids of one name: the last wins
    events = np.sort(rng.integers(0, 40, 120))
    sids = rng.choice(list(names), 120)
    values = rng.integers(-5, 1 << 40, 120)
    rows = OwnStats(rows=(events, sids, values), names=names)
    as_dict: dict[int, list[tuple[str, object]]] = {}
    for e, s, v in zip(events.tolist(), sids.tolist(), values.tolist(), strict=True):
        as_dict.setdefault(e, []).append((names[s], v))
    want = {e: tuple(items) for e, items in as_dict.items()}
    assert rows == want and dict(rows) == want
    for name in ("group_id", "program_id", "run_id"):
        got = rows.last(name, 45)
        assert got is not None
        has, value = got
        for e in range(45):
            held = dict(want.get(e, ())).get(name)
            assert bool(has[e]) == (held is not None) and (held is None or int(value[e]) == held)
    joined = OwnStats.joined([rows, OwnStats({50: (("group_id", "x"),)})])
    assert joined.last("group_id", 51) is None and joined[50] == (("group_id", "x"),) and joined[events[0]] == want[events[0]]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.intp])
@pytest.mark.parametrize("n", [0, 5, (1 << 18) + 7, 3 * (1 << 18)])
def test_counts_is_bincount(dtype: type, n: int) -> None:
    values = np.random.default_rng(n).integers(0, 100, n).astype(dtype)
    for minlength in (0, 150):
        got, want = counts(values, minlength), np.bincount(values, minlength=minlength)
        assert np.array_equal(got, want) and len(got) == len(want)


def test_execution_ids_and_occurrences_narrow_per_line_and_join_widest() -> None:
    cols, huge = OpColumns(), OpColumns()
    start, duration = np.arange(4, dtype=np.float64), np.ones(4)
    for c in (cols, huge):  # code 0 of each vocabulary
        c.modules.code("jit_step"), c.program_ids.code(1), c.ops.code("fusion")
    codes = np.zeros(4, np.int64)
    cols.add("h", "d", codes, codes, codes, start, duration, np.array([0, 1, 2, -1]), np.ones(4, np.int64))
    cols.add("h", "d", codes, codes, codes, start + 10, duration, np.array([0, 1, 1 << 20, 3]),
             np.array([1, 1, 300, 1]))
    assert [c.dtype for c in cols.chunks[8]] == [np.int8, np.int32]
    assert [c.dtype for c in cols.chunks[9]] == [np.int8, np.int16]
    ev = cols.finish()
    assert ev.run_id.dtype == np.int32 and ev.run_id.tolist() == [0, 1, 2, -1, 0, 1, 1 << 20, 3]
    assert ev.occurrences.dtype == np.int16 and ev.occurrences.tolist() == [1, 1, 1, 1, 1, 1, 300, 1]
    huge.add("h", "d", codes, codes, codes, start, duration, np.array([0, 1 << 40, 2, 3]), np.ones(4, np.int64))
    assert huge.finish().run_id.tolist() == [0, 1 << 40, 2, 3]


def test_a_capture_is_read_and_summed_before_pandas_is_loaded() -> None:
    """In a fresh process: the host's read, its columns, their sums and the step breakdown leave
    pandas unloaded (their peak is without pandas's 35-77 MiB); the table built from them loads it."""
    capture = Path(__file__).resolve().parents[2] / "sample_traces" / "gpu_h200_original"
    code = f"""
import sys
from pathlib import Path
from hlo_doctor.hosts import PodOptions, read_capture
from hlo_doctor.hosts.work import HostPart, HostTask, read_one
from hlo_doctor.trace.read import find_xplanes
(path,) = find_xplanes(Path({str(capture)!r}))
part = read_one(HostTask(str(path)))
assert isinstance(part, HostPart) and part.totals is not None and part.totals.breakdown
print("after the host's sums", "pandas.core.frame" in sys.modules)
stats, _ = read_capture(Path({str(capture)!r}), PodOptions())
assert len(stats.table)
print("after the table", "pandas.core.frame" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split("\n")[:2] == ["after the host's sums False", "after the table True"], out.stdout + out.stderr


def test_the_gate_reads_both_pods_before_pandas_is_loaded(tmp_path: Path) -> None:
    """In a fresh process: ``gate``'s two sides (pods of two real H200 host files each, read in the
    command's process) are both read and summed before either's table loads pandas, so pandas is
    not resident under the second side's read."""
    (sample,) = (Path(__file__).resolve().parents[2] / "sample_traces" / "gpu_h200_original").glob("plugins/profile/*/*.xplane.pb")
    for side in ("a", "b"):
        run = tmp_path / side / "plugins" / "profile" / "2026_01_01_00_00_00"
        run.mkdir(parents=True)
        for host in ("h1", "h2"):
            (run / f"{host}.xplane.pb").write_bytes(sample.read_bytes())
    code = f"""
import sys
from pathlib import Path
from hlo_doctor.cli.gate import load_side
from hlo_doctor.hosts import PodOptions
a = load_side(Path({str(tmp_path / 'a')!r}), "baseline", PodOptions())
b = load_side(Path({str(tmp_path / 'b')!r}), "candidate", PodOptions())
print("after both reads", "pandas.core.frame" in sys.modules)
assert len(a().table) and len(b().table)
print("after the tables", "pandas.core.frame" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split("\n")[-3:-1] == ["after both reads False", "after the tables True"], out.stdout + out.stderr
