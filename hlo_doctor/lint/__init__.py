"""Lint: the rule API, what rules see, loading rule files and running them.

Rule files import only this package and :mod:`hlo_doctor.hlo` (plus the standard library):

- :mod:`~hlo_doctor.lint.rule`: :class:`Rule`, :class:`Example`;
- :mod:`~hlo_doctor.lint.context`: :class:`Context` (modules, op stats, compile events, memory), :class:`OpTiming`;
- the programs' memory (:class:`ProgramMemory`, :class:`PeakBuffer`, :class:`MemoryReport`, from
  :mod:`hlo_doctor.memory`), which ``ctx.program_memory(module)`` gives, and
  :func:`peak_with_resized` (the peak with one temporary resized: what a memory fix frees);
- :mod:`~hlo_doctor.lint.compiles`: :func:`compile_account` (programs compiled in the window, eager ops);
- :mod:`~hlo_doctor.lint.inputs`: :func:`load_context` for every input kind;
- :mod:`~hlo_doctor.lint.loader`: rule files by path, :class:`RuleBook`;
- :mod:`~hlo_doctor.lint.runner`: :func:`diagnose` -> :class:`Diagnosis`;
- :mod:`~hlo_doctor.lint.stage`: :func:`stage_of` (optimized or as lowered);
- :mod:`~hlo_doctor.lint.testing`: examples as tests, shared HLO fixtures.
"""

from __future__ import annotations

from hlo_doctor.core.format import fmt_bytes, fmt_duration
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.lint.compiles import CompileAccount, ProgramCompiles, compile_account
from hlo_doctor.lint.context import Context, OpTiming, producing_convert_program
from hlo_doctor.lint.inputs import context_from_example, executed_modules, load_context, table_from_records
from hlo_doctor.lint.loader import LoadedRule, RuleBook, RuleLoadError, load_rulebook
from hlo_doctor.lint.rule import DOC_SECTIONS, REQUIREMENTS, Example, Rule
from hlo_doctor.lint.runner import Diagnosis, diagnose, run_rule, total_recoverable
from hlo_doctor.lint.stage import Stage, stage_of
from hlo_doctor.memory import MemoryReport, PeakBuffer, ProgramMemory, peak_with, peak_with_resized
from hlo_doctor.trace import CompileEvent

__all__ = [
    "DOC_SECTIONS", "REQUIREMENTS", "CompileAccount", "CompileEvent", "Context", "Diagnosis", "Example", "Finding",
    "LoadedRule", "MemoryReport", "OpTiming", "PeakBuffer", "ProgramCompiles", "ProgramMemory", "Rule", "RuleBook", "RuleLoadError", "Severity", "Stage",
    "compile_account", "context_from_example", "diagnose",
    "executed_modules", "fmt_bytes", "fmt_duration", "load_context", "load_rulebook", "peak_with", "peak_with_resized", "producing_convert_program",
    "run_rule", "stage_of", "table_from_records", "total_recoverable",
]
