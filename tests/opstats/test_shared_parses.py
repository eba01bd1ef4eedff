"""Two captures of one program read inside ``shared_module_parses`` parse each module text once and
give the same tables as read apart (the gate reads its baseline and candidate this way)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hlo_doctor.opstats import load_opstats
from hlo_doctor.opstats.build import shared_module_parses

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
ENGINE_A = SAMPLES / "engine_b64_original_a"  # 1.9 MB XLA:CPU xplanes of one program, 67 modules each
ENGINE_B = SAMPLES / "engine_b64_original_b"


def test_shared_parses_parse_a_text_once_and_change_no_table() -> None:
    apart = [load_opstats(ENGINE_A), load_opstats(ENGINE_B)]
    with shared_module_parses():
        shared = [load_opstats(ENGINE_A), load_opstats(ENGINE_B)]
    for one, other in zip(apart, shared, strict=True):
        pd.testing.assert_frame_equal(one.table, other.table)
        assert [(m.name, m.program_id, m.text) for m in one.modules] == \
            [(m.name, m.program_id, m.text) for m in other.modules]
    # Parsed apart, no two modules share their computations; shared, a text's parse serves each capture.
    assert not {id(m.computations) for m in apart[0].modules} & {id(m.computations) for m in apart[1].modules}
    by_text = {m.text: m.computations for m in shared[0].modules}
    assert all(by_text[m.text] is m.computations for m in shared[1].modules if m.text in by_text)
    assert len({id(m.computations) for m in shared[0].modules + shared[1].modules}) < len(shared[0].modules)
