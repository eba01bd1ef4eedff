"""``stats --group-by shape``: each group's label comes from the rows it groups.

On the bundled engine's capture a standalone convert program (``wrapped_convert``, a fusion) and the
LM head's matmul (``ynn_fusion``, a fusion) write the same ``f32[64,256000]``: grouped by opcode and
shape alone, the convert's time was labelled with the matmul's category.
"""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.opstats import group_by_shape, load_opstats

ENGINE = Path(__file__).resolve().parents[2] / "sample_traces" / "engine_b64_original_a"


def test_every_group_is_labelled_by_its_own_rows() -> None:
    table = load_opstats(ENGINE).table
    grouped = group_by_shape(table)
    key = table["opcode"].where(table["opcode"] != "", table["op"])
    for g in grouped.itertuples(index=False):
        rows = table[(key == g.opcode) & (table["shape"] == g.shape) & (table["category"].astype(str) == g.category)]
        assert len(rows) == g.ops and abs(float(rows["time_per_step_us"].sum()) - g.time_per_step_us) < 1e-6
    assert abs(float(grouped["time_per_step_us"].sum()) - float(table["time_per_step_us"].sum())) < 1e-3
    convert = table[(table["module"] == "jit_convert_element_type")]
    (row,) = convert.itertuples(index=False)
    (mine,) = [g for g in grouped.itertuples(index=False) if g.shape == row.shape and g.category == "convert"
               and g.opcode == row.opcode]
    assert mine.time_per_step_us == row.time_per_step_us and row.category == "convert"
