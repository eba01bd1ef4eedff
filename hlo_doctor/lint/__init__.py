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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hlo_doctor.core.format import fmt_bytes, fmt_duration
    from hlo_doctor.core.model import Finding, Severity
    from hlo_doctor.lint.compiles import CompileAccount, ProgramCompiles, compile_account
    from hlo_doctor.lint.context import Context, OpTiming, producing_convert_program
    from hlo_doctor.lint.inputs import (
        context_from_example,
        executed_modules,
        load_context,
        table_from_records,
    )
    from hlo_doctor.lint.loader import LoadedRule, RuleBook, RuleLoadError, load_rulebook
    from hlo_doctor.lint.rule import DOC_SECTIONS, REQUIREMENTS, Example, Rule
    from hlo_doctor.lint.runner import Diagnosis, diagnose, run_rule, total_recoverable
    from hlo_doctor.lint.stage import Stage, stage_of
    from hlo_doctor.memory import MemoryReport, PeakBuffer, ProgramMemory, peak_with, peak_with_resized
    from hlo_doctor.trace import CompileEvent

_FROM: dict[str, str] = {
    **dict.fromkeys(("fmt_bytes", "fmt_duration"), "hlo_doctor.core.format"),
    **dict.fromkeys(("Finding", "Severity"), "hlo_doctor.core.model"),
    **dict.fromkeys(("CompileAccount", "ProgramCompiles", "compile_account"), "hlo_doctor.lint.compiles"),
    **dict.fromkeys(("Context", "OpTiming", "producing_convert_program"), "hlo_doctor.lint.context"),
    **dict.fromkeys(("context_from_example", "executed_modules", "load_context", "table_from_records"),
                    "hlo_doctor.lint.inputs"),
    **dict.fromkeys(("LoadedRule", "RuleBook", "RuleLoadError", "load_rulebook"), "hlo_doctor.lint.loader"),
    **dict.fromkeys(("DOC_SECTIONS", "REQUIREMENTS", "Example", "Rule"), "hlo_doctor.lint.rule"),
    **dict.fromkeys(("Diagnosis", "diagnose", "run_rule", "total_recoverable"), "hlo_doctor.lint.runner"),
    **dict.fromkeys(("Stage", "stage_of"), "hlo_doctor.lint.stage"),
    **dict.fromkeys(("MemoryReport", "PeakBuffer", "ProgramMemory", "peak_with", "peak_with_resized"),
                    "hlo_doctor.memory"),
    "CompileEvent": "hlo_doctor.trace",
}
"""Where each name of the package comes from. A name is imported from its module the first time it is
read (PEP 562): ``stats`` reads the compile account (:mod:`~hlo_doctor.lint.compiles`) without loading
the rule runner, the loaders and the memory model."""

__all__ = [
    "DOC_SECTIONS", "REQUIREMENTS", "CompileAccount", "CompileEvent", "Context", "Diagnosis", "Example", "Finding",
    "LoadedRule", "MemoryReport", "OpTiming", "PeakBuffer", "ProgramCompiles", "ProgramMemory", "Rule", "RuleBook",
    "RuleLoadError", "Severity", "Stage", "compile_account", "context_from_example", "diagnose", "executed_modules",
    "fmt_bytes", "fmt_duration", "load_context", "load_rulebook", "peak_with", "peak_with_resized",
    "producing_convert_program", "run_rule", "stage_of", "table_from_records", "total_recoverable",
]


def __getattr__(name: str) -> Any:
    module = _FROM.get(name)
    if module is None:
        # A submodule not imported yet (``hlo_doctor.lint.runner``), as when this package imported them all.
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM})
