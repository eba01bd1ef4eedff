"""``verify FILE.py:FUNC``: any program's step function against a fixed copy of its file (``--fix``) or
another target (``--treatment B.py:FUNC``), interleaved in this process as the engine A/B is.

A target is what ``hlo-doctor profile FILE.py:FUNC`` takes: a function with no argument that runs one
step and returns JAX arrays, loaded the same way (:func:`hlo_doctor.capture.resolve_target`). With
``--fix``, the catalog's codemod is applied to a copy of the file in the run's work folder; the file
itself is only read. Without ``--fix-line`` the baseline is captured first and the fix goes to the lines
its own findings name.

Files: ``settings`` (:class:`ProgramSettings`, the least rounds the statistics need), ``sites`` (the
lines the baseline's findings offer the fix at), ``target`` (the fixed copy, loading a side), ``outputs`` (host copies of a step's outputs, the first differing element),
``measure`` (warm-up and interleaved rounds), ``evidence`` (each side's capture, check 3, the removed
ops), ``results`` (the frozen values) and ``run`` (:func:`run_program`, checks 1-4).
"""

from __future__ import annotations

from hlo_doctor.verify.program.results import ProgramReport, SideSummary
from hlo_doctor.verify.program.run import run_program
from hlo_doctor.verify.program.settings import ProgramSettings, min_rounds, validate_program_settings

__all__ = ["ProgramReport", "ProgramSettings", "SideSummary", "min_rounds", "run_program", "validate_program_settings"]
