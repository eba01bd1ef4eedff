"""What an argmax reads, on XLA:GPU HLO captured on an H200 (jax 0.11.2).

``h200_sample_logprobs.hlo.txt`` is the fixed ``sample()`` of the reference engine with logprobs
on: the first argmax stage is a multi-output fusion that reads the bf16 logits and writes both the
[64,256] partials and the float32 logits the logprobs need, so the second stage reaches the partials
through get-tuple-element(get-tuple-element(fusion)).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.hlo import HloModule, parse_module
from hlo_doctor.hlo.analysis import argmax_reads, reads_partials, selection_reduces

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class _Modules:
    modules: tuple[HloModule, ...]


def _sample() -> HloModule:
    return parse_module((DATA / "h200_sample_logprobs.hlo.txt").read_text())


def test_second_stage_behind_nested_tuple_indices_reads_partials() -> None:
    module = _sample()
    stages = [(op.name, reads_partials(module, inner)) for op, inner, kind in selection_reduces(module)
              if kind == "argmax"]
    assert stages == [("input_convert_reduce_fusion", False), ("input_reduce_fusion", True)]


def test_argmax_reads_the_bf16_logits_not_the_partials() -> None:
    assert argmax_reads(_Modules((_sample(),))) == ("jit_sample: bf16[64,256000]",)
