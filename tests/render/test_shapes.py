"""Shapes people read: a loop that carries 73 buffers does not make a 1,300-column table or line.

The shape is the one XLA:CPU printed for the ``while`` of recurrentgemma 1.0.1's sampler (its
``Sampler._sample_fn`` decode loop on a small random Griffin), read from the op table of that capture.
"""

from __future__ import annotations

import json

from hlo_doctor.hlo.shape import SHAPE_LIMIT, fmt_shape
from hlo_doctor.lint import Finding, Severity
from hlo_doctor.lint.runner import Diagnosis
from hlo_doctor.render.diagnosis import to_json, to_text

RECURRENTGEMMA_WHILE = (
    '(s32[8,16]{1,0}, s32[], s32[8,1]{1,0}, f32[8,256]{1,0}, bf16[8,3,256]{2,1,0}, f32[8,256]{1,0}, b'
    'f16[8,3,256]{2,1,0}, bf16[8,64,1,64]{3,2,1,0}, bf16[8,64,1,64]{3,2,1,0}, s32[8]{0}, s32[], pred['
    '8]{0}, f32[1536,256]{1,0}, f32[1536,256]{1,0}, f32[4,64,64]{2,1,0}, f32[1536,256]{1,0}, f32[4,64'
    ',64]{2,1,0}, f32[8192,256]{1,0}, f32[1,256]{1,0}, f32[256,256]{1,0}, f32[1,256]{1,0}, f32[1,256]'
    '{1,0}, f32[1,256]{1,0}, f32[1,256]{1,0}, f32[1,256]{1,0}, f32[1,256]{1,0}, f32[1,4,64]{2,1,0}, f'
    '32[1,256]{1,0}, f32[4,64,64]{2,1,0}, f32[1,4,64]{2,1,0}, f32[256,256]{1,0}, f32[1,256]{1,0}, f32'
    '[256,256]{1,0}, f32[1,256]{1,0}, f32[1,256]{1,0}, f32[2,1,768]{2,1,0}, f32[768,256]{1,0}, f32[1,'
    '256]{1,0}, f32[1,256]{1,0}, f32[256,256]{1,0}, f32[1,256]{1,0}, f32[1,256]{1,0}, f32[1,256]{1,0}'
    ', f32[1,256]{1,0}, f32[1,256]{1,0}, f32[1,256]{1,0}, f32[1,4,64]{2,1,0}, f32[1,256]{1,0}, f32[4,'
    '64,64]{2,1,0}, f32[1,4,64]{2,1,0}, f32[256,256]{1,0}, f32[1,256]{1,0}, f32[256,256]{1,0}, f32[1,'
    '256]{1,0}, f32[1,256]{1,0}, f32[2,1,768]{2,1,0}, f32[768,256]{1,0}, f32[1,256]{1,0}, f32[1,256]{'
    '1,0}, f32[256,64]{1,0}, f32[256,64]{1,0}, f32[16]{0}, f32[256,256]{1,0}, f32[16]{0}, f32[256,256'
    ']{1,0}, f32[1,256]{1,0}, f32[1,256]{1,0}, f32[2,1,768]{2,1,0}, f32[768,256]{1,0}, f32[1,256]{1,0'
    '}, f32[1,256]{1,0}, f32[256,8192]{1,0}, s32[2]{0})'
)
ELEMENTS = 73


def test_a_long_tuple_keeps_its_first_elements_and_counts_the_rest() -> None:
    short = fmt_shape(RECURRENTGEMMA_WHILE)
    assert len(short) <= SHAPE_LIMIT
    head, rest = short[1:].split(", ... +")
    assert RECURRENTGEMMA_WHILE.startswith("(" + head + ", ")
    assert head.count("]") + int(rest.removesuffix(" more)")) == ELEMENTS
    assert head.startswith("s32[8,16]{1,0}, s32[], s32[8,1]{1,0}")


def test_short_shapes_are_left_whole() -> None:
    for shape in ("(f32[64]{0}, s32[64]{0})", "bf16[64,256000]{1,0}", "f32[8,16]{1,0:T(8,128)}"):
        assert fmt_shape(shape) == shape


def test_a_finding_line_on_the_loop_is_readable_and_the_json_keeps_the_shape() -> None:
    finding = Finding(code="HD009", name="undonated-loop-state", severity=Severity.INFO, message="m",
                      module="jit__sample_fn", op="while.4", shape=RECURRENTGEMMA_WHILE)
    diagnosis = Diagnosis(findings=(finding,), step_time_us=None, recoverable_us=None, num_steps=3,
                          origin="run", kind="run", backend="cpu", rules_run=("HD009",))
    line = to_text(diagnosis, "concise").splitlines()[0]
    assert len(line) < 200 and "while.4 (s32[8,16]{1,0}, " in line
    assert json.loads(to_json(diagnosis))["findings"][0]["shape"] == RECURRENTGEMMA_WHILE
