"""A target that runs no compiled JAX code: its trace has no HLO op events."""

from __future__ import annotations


def step() -> int:
    return 1
