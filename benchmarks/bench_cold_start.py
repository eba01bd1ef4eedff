"""Cold-start time of the light commands: ``--version``, ``--help``, ``rules``, and ``stats``,
``diagnose``, ``gate`` on small real captures.

Each command runs in a fresh process (``python -m hlo_doctor.cli ...``), the commands interleaved
round after round so that a burst of load on a shared machine touches all of them alike; the table
gives the median wall time of ``--runs`` rounds, the median CPU time of the process (user + system:
what a loaded machine stretches least) and the load average before and after.

To compare with another checkout (an older commit), give its folder: the commands run there, so
that its package is the one imported (the working folder comes first on ``sys.path``)::

    git worktree add /tmp/hlo-before <commit>
    python benchmarks/bench_cold_start.py --runs 5 --tree /tmp/hlo-before --tree .

To compare environments (another version of a dependency), give their interpreters: each tree is
run with each ``--python`` (default: this one), interleaved the same way::

    cp -a .venv /tmp/venv-other && /tmp/venv-other/bin/pip install "ml_dtypes==0.7.0"
    python benchmarks/bench_cold_start.py --runs 5 --python /tmp/venv-other/bin/python --python .venv/bin/python \
        --only "import jax" --only "diagnose 1.9 MB, measuring"

``import jax`` is jax's own import and CPU client in a fresh interpreter (what every process of the
tool that runs a program pays: the HLO printer, a replay, verify's children); ``diagnose 1.9 MB,
measuring`` is ``diagnose --remeasure`` with a 1 s measuring budget (``HLO_DOCTOR_MEASURE_SECONDS``),
its measurements kept in a temporary cache folder: the replay of the capture's programs in a child
process of its own.

The captures, read from this checkout whichever tree is measured: ``sample_traces/gpu_h200_seed_b512``
(XLA:GPU, a 108 KB xplane, 2 HLO modules; ``gate`` compares it with itself, an A/A check) and
``sample_traces/engine_b64_original_a`` and ``_b`` (XLA:CPU, 1.9 MB xplanes, 67 HLO modules each; two
captures of one program for ``gate``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "sample_traces" / "gpu_h200_seed_b512"
CAPTURE_A = ROOT / "sample_traces" / "engine_b64_original_a"
CAPTURE_B = ROOT / "sample_traces" / "engine_b64_original_b"

_JAX = ["-c", "import jax; jax.devices('cpu')"]
"""Not an hlo-doctor command: the interpreter's arguments for jax's import and its CPU client."""

COMMANDS: dict[str, list[str]] = {
    "import jax": _JAX,
    "--version": ["--version"],
    "--help": ["--help"],
    "rules": ["rules"],
    "stats 108 KB": ["stats", str(SMALL), "--jobs", "1"],
    "diagnose 108 KB": ["diagnose", str(SMALL), "--jobs", "1"],
    "gate 108 KB x 2": ["gate", str(SMALL), str(SMALL), "--jobs", "1"],
    "stats 1.9 MB": ["stats", str(CAPTURE_A), "--jobs", "1"],
    "diagnose 1.9 MB": ["diagnose", str(CAPTURE_A), "--jobs", "1"],
    "gate 1.9 MB x 2": ["gate", str(CAPTURE_A), str(CAPTURE_B), "--jobs", "1"],
    "diagnose 1.9 MB, measuring": ["diagnose", str(CAPTURE_A), "--jobs", "1", "--remeasure"],
}
MEASURING_ENV = {"HLO_DOCTOR_MEASURE_SECONDS": "1", "HLO_DOCTOR_WHAT_IF_SECONDS": "1"}


def _load() -> str:
    """The 1-minute load average, as ``uptime`` prints it."""
    return f"{os.getloadavg()[0]:.2f}"


def _time_once(tree: Path, python: str, args: list[str], cache: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one ``hlo-doctor ARGS`` in a fresh process of ``python`` run from
    ``tree``'s package (its children included: the printer, a replay)."""
    env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=str(cache), **MEASURING_ENV)
    argv = [python, *args] if args is _JAX else [python, "-m", "hlo_doctor.cli", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # gate exits 1 on a regression (two captures of a shared machine may differ): still a finished run.
    if done.returncode not in (0, 1):
        raise SystemExit(f"hlo-doctor {' '.join(args)} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    return seconds, cpu


def _package_of(tree: Path, python: str) -> Path:
    """The folder of the ``hlo_doctor`` package a command run in ``tree`` imports."""
    done = subprocess.run([python, "-c", "import hlo_doctor; print(hlo_doctor.__file__)"], cwd=tree,
                          capture_output=True, text=True, check=True)
    return Path(done.stdout.strip()).parent


def _versions(python: str) -> str:
    """jax, jaxlib, ml_dtypes and numpy of ``python``'s environment, as one label."""
    code = ("from importlib import metadata as m; "
            "print(' '.join(f'{d} {m.version(d)}' for d in ('jaxlib', 'ml_dtypes', 'numpy')))")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


Setup = tuple[Path, str]
"""(tree, interpreter) a column is measured with."""


def measure(setups: list[Setup], runs: int, cache: Path) -> dict[tuple[Setup, str], list[tuple[float, float]]]:
    """(wall, CPU) seconds per (setup, command), ``runs`` rounds of every command of every setup, interleaved."""
    times: dict[tuple[Setup, str], list[tuple[float, float]]] = {}
    for _ in range(runs):
        for setup in setups:
            for name, args in COMMANDS.items():
                times.setdefault((setup, name), []).append(_time_once(*setup, args, cache))
    return times


def _label(setup: Setup, setups: list[Setup]) -> str:
    """A column's name: the tree's folder, and the interpreter's path where several are measured."""
    tree, python = setup
    trees = {t for t, _ in setups}
    pythons = {p for _, p in setups}
    parts = ([tree.name] if len(trees) > 1 or len(pythons) == 1 else []) + ([python] if len(pythons) > 1 else [])
    return " ".join(parts)


def main() -> None:
    """Parse the flags, measure, print one Markdown table (median seconds per command and tree)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds (the median is reported)")
    parser.add_argument("--tree", type=Path, action="append",
                        help="checkout to measure (repeatable; default: this one)")
    parser.add_argument("--python", action="append",
                        help="interpreter to run the commands with (repeatable; default: this one)")
    parser.add_argument("--only", action="append", choices=list(COMMANDS), help="commands to time (repeatable)")
    flags = parser.parse_args()
    trees = [t.resolve() for t in (flags.tree or [ROOT])]
    pythons = flags.python or [sys.executable]
    if flags.only:
        for name in list(COMMANDS):
            if name not in flags.only:
                del COMMANDS[name]
    setups = [(tree, python) for tree in trees for python in pythons]
    for tree, python in setups:
        if _package_of(tree, python) != tree / "hlo_doctor":
            raise SystemExit(f"{tree}: commands run there import {_package_of(tree, python)}, not its own package")
    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="bench-cold-start-") as cache:
        times = measure(setups, flags.runs, Path(cache))
    load_after = _load()
    labels = [_label(s, setups) for s in setups]
    print("| command | " + " | ".join(f"{lb}: wall s, median (min-max) | {lb}: CPU s" for lb in labels) + " |")
    print("|---|" + "---:|---:|" * len(setups))
    for name in COMMANDS:
        cells = []
        for setup in setups:
            wall = [w for w, _ in times[(setup, name)]]
            cpu = [c for _, c in times[(setup, name)]]
            cells.append(f"{statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f}) | "
                         f"{statistics.median(cpu):.2f}")
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    print(f"\n{flags.runs} runs each; load average (1 min) {load_before} before, {load_after} after; "
          f"{os.cpu_count()} cores")
    for python in dict.fromkeys(pythons):
        print(f"{python}: {_versions(python)}")


if __name__ == "__main__":
    main()
