"""Shared fixtures. Real JAX on CPU throughout; nothing of JAX, XLA or xprof is mocked."""

from __future__ import annotations

import os

# Keep XLA:CPU quiet and deterministic in tests.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
