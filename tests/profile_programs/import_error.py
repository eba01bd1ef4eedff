"""A target that fails on import."""

from __future__ import annotations

raise RuntimeError("missing checkpoint")
