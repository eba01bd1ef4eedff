"""verify's note on an argmax that reads the narrow dtype and still got slower (jaxlib 0.10's XLA:CPU)."""

from __future__ import annotations

import jaxlib

from hlo_doctor.verify.engine.run import _slower_narrow_reads
from hlo_doctor.verify.results import RemovedOp

# The figures of `make doctor` on jaxlib 0.10.2's XLA:CPU (README): the argmax fusion 37.1 -> 64.9 ms/step.
SLOWER = RemovedOp("HD004", "iota_reduce_fusion", "jit_sample", "(f32[64]{0}, s32[64]{0})", 37_091.0, "narrowed",
                   64_940.0)
FASTER = RemovedOp("HD004", "iota_reduce_fusion", "jit_sample", "(f32[64]{0}, s32[64]{0})", 36_252.0, "narrowed",
                   27_130.0)
GONE = RemovedOp("HD002", "copy", "jit_sample", "f32[64,256000]{1,0}", 2_131.0, "gone")


def test_a_slower_narrow_read_on_cpu_is_explained() -> None:
    (note,) = _slower_narrow_reads((SLOWER, GONE), "cpu")
    assert "jit_sample/iota_reduce_fusion" in note and "37.09 -> 64.94 ms/step, x1.75" in note
    assert f"jaxlib {jaxlib.__version__}" in note


def test_a_faster_narrow_read_or_a_removed_op_needs_no_note() -> None:
    assert _slower_narrow_reads((FASTER, GONE), "cpu") == []
    assert "XLA:CPU" not in _slower_narrow_reads((SLOWER,), "gpu")[0]
