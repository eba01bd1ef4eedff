"""What the threat-model tests share (helpers, not tests): a fresh copy of the reference engine to attack, the CLI as a
real process, and a byte-exact picture of a folder (files, links and folders)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "hlo_doctor" / "engine"
FIX = "bf16-greedy-sampler"
FIX_FILES = ("compilation_manager.py", "runner.py", "sampling.py")

_MAIN = "import sys; from hlo_doctor.cli import main; sys.argv[0] = 'hlo-doctor'; main()"


def copy_engine(dest: Path) -> Path:
    """A copy of the reference engine's source at ``dest`` (a fix target)."""
    shutil.copytree(ENGINE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def engine_tree(tmp_path: Path) -> Path:
    """A fresh engine tree at ``tmp_path/engine``, beside an ``outside`` folder the attacks aim at."""
    (tmp_path / "outside").mkdir(parents=True)
    return copy_engine(tmp_path / "engine")


def picture(root: Path) -> dict[str, object]:
    """Every entry under ``root``: file bytes, link targets, folders (for byte-exact comparisons)."""
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir",)
        else:
            out[rel] = path.read_bytes()
    return out


def leftovers(root: Path) -> list[str]:
    """Temporary files or a journal left anywhere under ``root``."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.name.endswith(".hlo-doctor-tmp") or p.name.endswith(".journal.json"))


def cli(*args: str, env: Mapping[str, str] | None = None, file_size_cap: int | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``hlo-doctor ARGS`` as a separate process (this checkout on its path). ``file_size_cap``: the
    child first caps the size of any file it writes (``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored, so a write
    past it fails with ``EFBIG``), set in the child itself rather than between fork and exec."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "COLUMNS": "200", **(env or {})}
    program = _MAIN
    if file_size_cap is not None:
        program = ("import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                   f"resource.setrlimit(resource.RLIMIT_FSIZE, ({file_size_cap}, {file_size_cap})); {_MAIN}")
    return subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, check=False)


def popen(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """``hlo-doctor ARGS`` started, not waited for."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "COLUMNS": "200", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", _MAIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full_env)


def apply_args(target: Path, *extra: str) -> tuple[str, ...]:
    """``apply-fix bf16-greedy-sampler --target TARGET EXTRA...``."""
    return ("apply-fix", FIX, "--target", str(target), *extra)
