"""A target that runs no compiled JAX code: its trace has no HLO op events."""

from __future__ import annotations


def step() -> int:
    return 1


def step_none() -> None:
    """A step that returns nothing: there is no result for the capture to wait for."""
    return None
