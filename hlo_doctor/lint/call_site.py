"""The line that issues an eager program each step, where the HLO names another (its first trace).

An eager program (``x.astype(f32)`` outside jit) is compiled once and cached: its HLO metadata keeps
the stack of the call that traced it first, often a warm-up or a precompile, not the call the steps
run. With the Python tracer's frames, :func:`hlo_doctor.lint.host_cost.call_cost` knows the frame
that issues it in the traced steps and the line of the call in it (:mod:`hlo_doctor.hlo.call_sites`):
that is the line a person edits, and the line every finding on the program points at.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace

from hlo_doctor.core.model import Finding
from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.origin import OpOrigin
from hlo_doctor.lint.context import Context
from hlo_doctor.lint.host_cost import call_cost

__all__ = ["at_step_caller", "step_caller"]


def step_caller(ctx: Context, module: HloModule, origin: OpOrigin) -> tuple[str, int, str] | None:
    """(path, line, function) of the Python frame that issues the eager program ``module`` in the
    traced steps, when it is not where the HLO names; None without the Python tracer's frames, for a
    program that is not eager or is issued inside a framework, or when the HLO's line is in that same
    function (it is then the call's own line too)."""
    cost = call_cost(ctx, module)
    if cost is None or not cost.caller_frames or not origin.eager or origin.framework:
        return None
    path, line, function = cost.caller_frames[0]
    frame = origin.frame
    if frame is not None and _same_file(frame.file, path) and frame.function.rsplit(".", 1)[-1] == function:
        return None
    return path, line, function


def _same_file(hlo_file: str, frame_file: str) -> bool:
    """Whether the HLO's file and the tracer's are one file: the same path where both are absolute
    (a ``sampler.py`` in another folder that traced the program first is another file), else the
    same file name (a relative path in the HLO names no folder to compare)."""
    a, b = (posixpath.normpath(f.replace("\\", "/")) for f in (hlo_file, frame_file))
    if _absolute(a) and _absolute(b):
        return a == b
    return a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]


def _absolute(path: str) -> bool:
    return path.startswith("/") or (len(path) > 2 and path[1] == ":" and path[2] == "/")


def at_step_caller(finding: Finding, caller: tuple[str, int, str] | None) -> Finding:
    """``finding`` pointing at ``caller`` (its source line, and its stack's innermost frame), or as it is."""
    if caller is None:
        return finding
    path, line, function = caller
    return replace(finding, source=f"{path}:{line}", stack=((path, line, function), *finding.stack))
