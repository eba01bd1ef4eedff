"""A target whose step raises."""

from __future__ import annotations


def step() -> None:
    raise ValueError("the model is not loaded")
