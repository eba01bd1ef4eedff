"""Replay: a fix's promise measured by compiling the capture's own programs here, with and without
its change, and timing them alternated (:mod:`.run`; which programs and changes: :mod:`.plan`; the
edits to the StableHLO: :mod:`.mlir_edit`; the timing process: :mod:`.child`; the allocator's
second state: :mod:`.allocator`)."""

from __future__ import annotations

from hlo_doctor.lint.replay.plan import REPLAYED, ReplayPlan, plan
from hlo_doctor.lint.replay.run import ReplayMeasurement, measure_fix, replay_refusal
from hlo_doctor.lint.replay.timing import PairedTiming, median_interval

__all__ = ["REPLAYED", "PairedTiming", "ReplayMeasurement", "ReplayPlan", "measure_fix", "median_interval", "plan",
           "replay_refusal"]
