"""Shared fixtures. Real JAX on CPU throughout; nothing of JAX, XLA or xprof is mocked."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Keep XLA:CPU quiet and deterministic in tests.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# What diagnose measures here is kept in the user's cache folder (hlo_doctor.lint.store): tests keep
# theirs in a folder of their own, removed at the end, and never read or write the user's.
_CACHE = tempfile.mkdtemp(prefix="hlo-doctor-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)

# What diagnose times on this machine (a fix's replay or A/B: HLO_DOCTOR_MEASURE_SECONDS, 10 s by default;
# a what-if: HLO_DOCTOR_WHAT_IF_SECONDS, 4 s) is judged here by how it is made, kept and shown, not by
# the figure: shorter budgets. A test that judges a budget sets its own.
os.environ.setdefault("HLO_DOCTOR_MEASURE_SECONDS", "1")
os.environ.setdefault("HLO_DOCTOR_WHAT_IF_SECONDS", "1")
