"""hlo-doctor: find, fix and gate wasted work in the compiled (HLO) programs of JAX serving stacks."""

from __future__ import annotations

__version__ = "0.1.0"
