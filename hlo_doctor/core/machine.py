"""What a timing made here stands for: this machine's node, CPU model and cores, as one line.

The measurement store keys a record on it, and ``profile`` writes it into run.json (``machine``) for a
program it ran here, so that a later diagnosis can tell a capture taken on this machine from one taken
elsewhere (:func:`hlo_doctor.lint.store.capture_machine`).
"""

from __future__ import annotations

import os
import platform
from functools import lru_cache

__all__ = ["machine_here"]


@lru_cache(maxsize=1)
def machine_here() -> str:
    """``node; cpu model; N cores``: what a timing made here stands for."""
    return f"{platform.node()}; {_cpu_model()}; {os.cpu_count() or 0} cores"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Hardware", "cpu model")):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"
