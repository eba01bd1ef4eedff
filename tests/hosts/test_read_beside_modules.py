"""One large host file read in the command's process (``--jobs 1``, or the default for a single file
of 32 MiB or more) has its HLO modules parsed in a thread beside the read (XLA's printer, a process
of its own, may still be starting): the same document as two worker processes give, whether or not
the host's Python frames need the modules' paths; an error of the modules is still the command's.

Real sample captures (an engine on XLA:CPU with the Python tracer's frames, an H200, a TPU); the
size limit lowered so that they take the large file's path."""

from __future__ import annotations

from pathlib import Path

import pytest

import hlo_doctor.hosts.capture as capture
from hlo_doctor.core.errors import InputError
from hlo_doctor.opstats import to_json

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.mark.parametrize("sample", ["engine_b64_original_a", "gpu_h200_original", "tpu_v5e_original"])
def test_the_modules_parsed_beside_the_read_give_the_workers_document(sample: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "WORKER_MIN_BYTES", 0)
    used: list[Path] = []
    beside = capture._read_beside_modules

    def spy(xplanes: list[Path], *args: object) -> object:
        used.extend(xplanes)
        return beside(xplanes, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(capture, "_read_beside_modules", spy)
    here, _ = capture.read_capture(SAMPLES / sample, capture.PodOptions(jobs=1))
    assert len(used) == 1
    workers, _ = capture.read_capture(SAMPLES / sample, capture.PodOptions(jobs=2))
    assert to_json(here, per_step=True) == to_json(workers, per_step=True)
    if sample.startswith("engine"):  # the frames were classified with the modules' paths
        assert here.breakdown is not None and here.breakdown.python_frames


def test_an_error_of_the_modules_is_the_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "WORKER_MIN_BYTES", 0)

    def unreadable(*_: object) -> object:
        raise InputError("the modules cannot be read", "capture again")

    monkeypatch.setattr(capture, "_modules", unreadable)
    with pytest.raises(InputError, match="the modules cannot be read"):
        capture.read_capture(SAMPLES / "engine_b64_original_a", capture.PodOptions(jobs=1))
