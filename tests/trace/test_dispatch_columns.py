"""A host line's dispatch spans (``dispatch._spans``) read from the line's columns, against the same
line's events as the protobuf runtime parses them (what ``_spans`` reads where no columns are): the
same spans, on the host planes of real captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlo_doctor.trace import dispatch
from hlo_doctor.trace.read import find_xplanes
from hlo_doctor.trace.stream import XSpaceFile

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


class _Parsed:
    """The line with its parsed events only (no columns)."""

    def __init__(self, line: object) -> None:
        self.events = line.events  # type: ignore[attr-defined]


@pytest.mark.parametrize("capture", ["gpu_h200_original", "engine_b64_original_a", "tpu_v5e_original"])
def test_spans_from_columns_are_the_parsed_events(capture: str) -> None:
    path = find_xplanes(SAMPLES / capture)[0]
    seen = 0
    with XSpaceFile(path, str(path)) as space:
        for ref in space.planes:
            if not ref.name.startswith("/host:"):
                continue
            plane = space.plane(ref)
            names = {e.key: m.group(1) for e in plane.event_metadata if (m := dispatch._DISPATCH.match(e.value.name))}
            for line in plane.lines:
                got = dispatch._spans(line, names)
                assert got == dispatch._spans(_Parsed(line), names)
                seen += len(got)
    assert seen > 0
