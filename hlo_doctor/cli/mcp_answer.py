"""What the MCP server and the process that runs its tools send each other (:mod:`.mcp_runner`,
:mod:`.mcp_worker`): the settings, the readiness word, one answer per tool call."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["READY", "START_S", "ToolAnswer", "WorkerSettings"]

READY = "ready"
"""The child's first answer: its settings read, the stages' modules imported."""
START_S = 120.0
"""Longest a new child may take to be ready (imports on a loaded machine)."""


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """What every tool call is held to: the roots, whether a safe fix may be written, the time limit."""

    roots: tuple[Path, ...]
    allow_write: bool = False
    timeout_s: float = 300.0


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """One tool call's answer: ``error`` (one line) or the document and the short text."""

    text: str
    doc: dict[str, Any] | None = None
    error: bool = False
    extra_text: tuple[str, ...] = field(default=())
    """More text blocks for people and models (a fix's diff)."""
