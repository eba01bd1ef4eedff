"""No BLAS threads in the processes that only read captures.

numpy loads OpenBLAS, which starts a thread per core at load and keeps them ready: about 0.06 CPU s
per process here for work these processes never give it (reading a capture does no linear
algebra), taken from the cores that read. A process that only reads (a command that reads
captures, XLA's printer, a host worker) starts numpy with one BLAS thread. A process that runs a
person's code (``profile``, ``verify``, ``doctor``, and the measurements' children) keeps the
environment as it was: the variables are set for numpy's load in this process alone and put back.
"""

from __future__ import annotations

import os
import sys

__all__ = ["BLAS_THREADS", "reading_env", "start_numpy_reading"]

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
"""The variables OpenBLAS reads at load (numpy's wheels' ``scipy-openblas``)."""


def reading_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a child process that only reads (one BLAS thread); a variable the person set is kept."""
    for var in BLAS_THREADS:
        env.setdefault(var, "1")
    return env


def start_numpy_reading() -> None:
    """Import numpy now with one BLAS thread, where this process has not imported it yet and the
    person set no thread count; the environment its children inherit is left as it was."""
    if "numpy" in sys.modules or any(var in os.environ for var in BLAS_THREADS):
        return
    for var in BLAS_THREADS:
        os.environ[var] = "1"
    try:
        import numpy  # noqa: F401 - OpenBLAS reads the variables as numpy loads it
    finally:
        for var in BLAS_THREADS:
            os.environ.pop(var, None)
