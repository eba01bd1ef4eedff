"""``verify --target``: a tpu-inference tree against its patched copy (or another tree), and ``--bench``.

Files: ``settings`` (:class:`TargetSettings`), ``results`` (:class:`LevelResult`, :class:`TargetReport`),
``target`` (the trees and the orchestration, :func:`run_target`), ``tpu_shim`` (importing the real
``sample()`` where vllm/torch are not installed), ``sampler_tree`` (what a tree's source says about
the dtype at ``sample()``'s boundary), ``program`` and ``program_run`` (the program level: the
real ``sample()`` of both trees, measured and checked), ``bench`` (the serving level: a benchmark
command per round).
"""

from __future__ import annotations

from hlo_doctor.verify.tpu_inference.results import LevelResult, TargetReport
from hlo_doctor.verify.tpu_inference.settings import TargetSettings
from hlo_doctor.verify.tpu_inference.target import run_target

__all__ = ["LevelResult", "TargetReport", "TargetSettings", "run_target"]
