"""A host plane read from the compiled reader's columns against the event-by-event loop it replaces.

The judge is the message loop of ``read_host_plane`` (each event a protobuf message, its stats read
one by one), run on the same planes: the XLA:CPU engine captures (their op events are on the host
plane), the H200 captures (runtime spans, the Python tracer's frames, compiles) and a TPU capture.
Both reads must give the same op columns (codes, times to the bit), the same step marks and the same
compile events, in the same order. A program that compiles inside its traced steps (a real
``profile`` of ``tests/profile_programs/recompiles.py``) holds the compile work and its callers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlo_doctor.trace import conventions, cwire
from hlo_doctor.trace.columns import OpColumns
from hlo_doctor.trace.read import find_xplanes
from hlo_doctor.trace.stream import XSpaceFile

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"

pytestmark = pytest.mark.skipif(not cwire.COMPILED, reason="the compiled reader is not built in this install")


def _read(xplane: Path, columns: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple[object, ...], tuple[object, ...],
                                                                             tuple[object, ...]]:
    with monkeypatch.context() as m:
        if not columns:
            m.setattr(conventions, "read_host_line", lambda *a, **k: None)
        cols, steps, compiles = OpColumns(), [], []  # type: ignore[var-annotated]
        with XSpaceFile(xplane) as space:
            for ref in space.planes:
                if ref.name.startswith("/host:") and ref.name != "/host:metadata":
                    conventions.read_host_plane(space.plane(ref), "h", True, cols, steps, compiles)
    ev = cols.finish()
    table = tuple((str(c), tuple(getattr(ev, c).categories.tolist()) if hasattr(getattr(ev, c), "categories") else (),
                   np.asarray(getattr(ev, c).codes if hasattr(getattr(ev, c), "codes") else getattr(ev, c)).tobytes())
                  for c in ("host", "device", "module", "program_id", "op", "start_ns", "duration_ns", "self_ns",
                            "run_id", "occurrences"))
    return table, tuple(steps), tuple(compiles)


@pytest.mark.parametrize("capture", ["engine_b64_original_a", "engine_b64_fixed", "gpu_h200_original",
                                     "gpu_h200_seed_b512", "tpu_v5e_original"])
def test_host_planes_read_from_columns_as_event_by_event(capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    xplane = find_xplanes(SAMPLES / capture)[0]
    table, steps, compiles = _read(xplane, True, monkeypatch)
    assert (table, steps, compiles) == _read(xplane, False, monkeypatch)
    if capture.startswith("engine"):
        assert len(table[5][2]) // 8 >= 100  # type: ignore[index]  # op events (float64 starts): from the host plane
    if capture.startswith("gpu"):
        assert steps


def test_compile_work_read_from_columns_as_event_by_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from hlo_doctor.cli import main

    program = Path(__file__).resolve().parents[1] / "profile_programs" / "recompiles.py"
    profiled = CliRunner().invoke(main, ["profile", f"{program}:step", "--steps", "2", "--warmup", "1",
                                         "--out", str(tmp_path / "run")])
    assert profiled.exit_code == 0, profiled.output
    xplane = find_xplanes(tmp_path / "run")[0]
    table, steps, compiles = _read(xplane, True, monkeypatch)
    assert (table, steps, compiles) == _read(xplane, False, monkeypatch)
    assert compiles and any(c.function for c in compiles) and steps  # type: ignore[attr-defined]


@pytest.mark.parametrize("capture", ["engine_b64_original_a", "gpu_h200_original", "tpu_v5e_original"])
def test_host_threads_read_from_columns_as_event_by_event(capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python tracer's frames, the dispatch spans and the compile work of every host thread
    (``python_frames.threads_of_plane``): the same columns from both reads, to the bit."""
    from hlo_doctor.trace import python_frames

    def threads() -> list[tuple[object, ...]]:
        out: list[tuple[object, ...]] = []
        with XSpaceFile(find_xplanes(SAMPLES / capture)[0]) as space:
            for ref in space.planes:
                if ref.name.startswith("/host:") and ref.name != "/host:metadata":
                    for t in python_frames.threads_of_plane("h", space.plane(ref)):
                        out.append((t.line, t.line_id, t.names, t.dispatches, t.frames, t.start_ns.tobytes(),
                                    t.end_ns.tobytes(), t.name_code.astype(np.int64).tobytes()))
        return out

    got = threads()
    with monkeypatch.context() as m:
        m.setattr(python_frames, "_columns", lambda *a, **k: None)
        assert got == threads()
    assert got and sum(len(t[5]) for t in got) // 8 >= 100  # type: ignore[arg-type,misc]
