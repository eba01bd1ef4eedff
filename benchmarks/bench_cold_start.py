"""Cold-start wall time of the light commands: ``--version``, ``--help``, ``rules``, and ``stats``,
``diagnose``, ``gate`` on a small real capture.

Each command runs in a fresh process (``python -m hlo_doctor.cli ...``), the commands interleaved
round after round so that a burst of load on a shared machine touches all of them alike; the table
gives the median of ``--runs`` rounds and the load average before and after.

To compare with another checkout (an older commit), give its folder: its package is put first on
``PYTHONPATH``, ahead of this venv's editable install::

    git worktree add /tmp/hlo-before <commit>
    python benchmarks/bench_cold_start.py --runs 5 --tree /tmp/hlo-before --tree .

The captures are ``sample_traces/engine_b64_original_a`` and ``_b`` (XLA:CPU, 1.9 MB xplanes with
their HLO modules), read from this checkout whichever tree is measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURE_A = ROOT / "sample_traces" / "engine_b64_original_a"
CAPTURE_B = ROOT / "sample_traces" / "engine_b64_original_b"

COMMANDS: dict[str, list[str]] = {
    "--version": ["--version"],
    "--help": ["--help"],
    "rules": ["rules"],
    "stats": ["stats", str(CAPTURE_A), "--jobs", "1"],
    "diagnose": ["diagnose", str(CAPTURE_A), "--jobs", "1"],
    "gate": ["gate", str(CAPTURE_A), str(CAPTURE_B), "--jobs", "1"],
}


def _load() -> str:
    """The 1-minute load average, as ``uptime`` prints it."""
    return f"{os.getloadavg()[0]:.2f}"


def _time_once(tree: Path, args: list[str]) -> float:
    """Wall seconds of one ``hlo-doctor ARGS`` in a fresh process run from ``tree``'s package."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH", "")])),
               NO_COLOR="1")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hlo_doctor.cli", *args], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - start
    # gate exits 1 on a regression (two captures of a shared machine may differ): still a finished run.
    if done.returncode not in (0, 1):
        raise SystemExit(f"hlo-doctor {' '.join(args)} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    return seconds


def measure(trees: list[Path], runs: int) -> dict[tuple[str, str], list[float]]:
    """Seconds per (tree, command), ``runs`` rounds of every command of every tree, interleaved."""
    times: dict[tuple[str, str], list[float]] = {}
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
    load_before = _load()
    times = measure(trees, flags.runs)
    load_after = _load()
    head = "| command | " + " | ".join(f"{t.name} median s (min-max)" for t in trees) + " |"
    print(head)
    print("|---|" + "---:|" * len(trees))
    for name in COMMANDS:
        cells = []
        for tree in trees:
            seconds = times[(str(tree), name)]
            cells.append(f"{statistics.median(seconds):.2f} ({min(seconds):.2f}-{max(seconds):.2f})")
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    print(f"\n{flags.runs} runs each; load average (1 min) {load_before} before, {load_after} after; "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
