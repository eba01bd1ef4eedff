"""Processes that only read start numpy with one BLAS thread; the environment children inherit is
the person's. Judged in fresh interpreters by the threads the process holds (``/proc/self/task``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hlo_doctor.core.blas import BLAS_THREADS, reading_env

_PROBE = """
import os, sys
from hlo_doctor.core.blas import start_numpy_reading
start_numpy_reading()
loaded = "numpy" in sys.modules
import numpy
print(loaded, len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def _probe(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in BLAS_THREADS}
    out = subprocess.run([sys.executable, "-c", _PROBE], env={**clean, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.split()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads are counted in /proc")
def test_a_reading_process_has_no_blas_threads_and_its_children_the_persons_environment() -> None:
    assert _probe() == ["True", "1", "None"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="threads are counted in /proc; one core starts no BLAS thread anyway")
def test_a_thread_count_the_person_set_is_theirs() -> None:
    # (numpy is then left to the command's own import, with the person's count)
    loaded, threads, var = _probe(OPENBLAS_NUM_THREADS="2")
    assert loaded == "False" and int(threads) == 2 and var == "2"


def test_a_reading_child_gets_one_blas_thread_unless_the_person_chose() -> None:
    assert reading_env({}) == {v: "1" for v in BLAS_THREADS}
    assert reading_env({"OPENBLAS_NUM_THREADS": "8"})["OPENBLAS_NUM_THREADS"] == "8"
