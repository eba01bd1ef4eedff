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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "sample_traces" / "gpu_h200_seed_b512"
CAPTURE_A = ROOT / "sample_traces" / "engine_b64_original_a"
CAPTURE_B = ROOT / "sample_traces" / "engine_b64_original_b"

COMMANDS: dict[str, list[str]] = {
    "--version": ["--version"],
    "--help": ["--help"],
    "rules": ["rules"],
    "stats 108 KB": ["stats", str(SMALL), "--jobs", "1"],
    "diagnose 108 KB": ["diagnose", str(SMALL), "--jobs", "1"],
    "gate 108 KB x 2": ["gate", str(SMALL), str(SMALL), "--jobs", "1"],
    "stats 1.9 MB": ["stats", str(CAPTURE_A), "--jobs", "1"],
    "diagnose 1.9 MB": ["diagnose", str(CAPTURE_A), "--jobs", "1"],
    "gate 1.9 MB x 2": ["gate", str(CAPTURE_A), str(CAPTURE_B), "--jobs", "1"],
}


def _load() -> str:
    """The 1-minute load average, as ``uptime`` prints it."""
    return f"{os.getloadavg()[0]:.2f}"


def _time_once(tree: Path, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``hlo-doctor ARGS`` in a fresh process run from ``tree``'s package."""
    env = dict(os.environ, NO_COLOR="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hlo_doctor.cli", *args], cwd=tree, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # gate exits 1 on a regression (two captures of a shared machine may differ): still a finished run.
    if done.returncode not in (0, 1):
        raise SystemExit(f"hlo-doctor {' '.join(args)} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    return seconds, cpu


def _package_of(tree: Path) -> Path:
    """The folder of the ``hlo_doctor`` package a command run in ``tree`` imports."""
    done = subprocess.run([sys.executable, "-c", "import hlo_doctor; print(hlo_doctor.__file__)"], cwd=tree,
                          capture_output=True, text=True, check=True)
    return Path(done.stdout.strip()).parent


def measure(trees: list[Path], runs: int) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(wall, CPU) seconds per (tree, command), ``runs`` rounds of every command of every tree, interleaved."""
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(runs):
        for tree in trees:
            for name, args in COMMANDS.items():
                times.setdefault((str(tree), name), []).append(_time_once(tree, args))
    return times


def main() -> None:
    """Parse the flags, measure, print one Markdown table (median seconds per command and tree)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds (the median is reported)")
    parser.add_argument("--tree", type=Path, action="append",
                        help="checkout to measure (repeatable; default: this one)")
    parser.add_argument("--only", action="append", choices=list(COMMANDS), help="commands to time (repeatable)")
    flags = parser.parse_args()
    trees = [t.resolve() for t in (flags.tree or [ROOT])]
    if flags.only:
        for name in list(COMMANDS):
            if name not in flags.only:
                del COMMANDS[name]
    for tree in trees:
        if _package_of(tree) != tree / "hlo_doctor":
            raise SystemExit(f"{tree}: commands run there import {_package_of(tree)}, not its own package")
    load_before = _load()
    times = measure(trees, flags.runs)
    load_after = _load()
    head = "| command | " + " | ".join(f"{t.name}: wall s, median (min-max) | {t.name}: CPU s" for t in trees) + " |"
    print(head)
    print("|---|" + "---:|---:|" * len(trees))
    for name in COMMANDS:
        cells = []
        for tree in trees:
            wall = [w for w, _ in times[(str(tree), name)]]
            cpu = [c for _, c in times[(str(tree), name)]]
            cells.append(f"{statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f}) | "
                         f"{statistics.median(cpu):.2f}")
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    print(f"\n{flags.runs} runs each; load average (1 min) {load_before} before, {load_after} after; "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
