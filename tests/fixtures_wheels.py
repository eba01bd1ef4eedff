"""Real tpu-inference wheels for the fix tests: fetched from the package registry once, cached.

The cache is ``~/.cache/hlo-doctor/wheels`` (or ``$HLO_DOCTOR_WHEEL_CACHE``); a wheel is fetched with
``python -m pip download --no-deps tpu-inference==X -d DIR``. The newest release is asked of the
registry (``pip index versions``) at most once a day and remembered in the cache.

Also: :func:`import_tpu_sampling`, which imports the real ``tpu_inference`` sampling module of a tree
on CPU. Only what that module's import chain needs from outside JAX is stood in for: the ``vllm``,
``torch`` and ``torchax`` modules (stub modules in ``sys.modules``). The ``tpu_inference`` package
``__init__`` files are not run (they probe the TPU platform); every ``tpu_inference`` module on the
import path of ``sampling.py`` is the real one. Nothing of JAX is stubbed.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

PINNED_RELEASES = ("0.23.0", "0.24.0", "0.26.0")
# Used only when the registry cannot be asked and nothing is cached (the newest one seen when the
# tests were written); the test output says so.
_LAST_KNOWN_NEWEST = "0.32.0"


def wheel_cache() -> Path:
    """The wheel cache folder (created)."""
    folder = Path(os.environ.get("HLO_DOCTOR_WHEEL_CACHE", Path.home() / ".cache" / "hlo-doctor" / "wheels"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def newest_release() -> str:
    """The newest tpu-inference release on the registry (cached for a day)."""
    memo = wheel_cache() / "newest-release.txt"
    if memo.is_file() and time.time() - memo.stat().st_mtime < 86400:
        return memo.read_text().strip()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", "tpu-inference"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        match = re.search(r"tpu-inference \(([^)]+)\)", out.stdout)
    except (OSError, subprocess.TimeoutExpired):
        match = None
    if match:
        memo.write_text(match.group(1) + "\n")
        return match.group(1)
    if memo.is_file():
        return memo.read_text().strip()
    return _LAST_KNOWN_NEWEST


def releases_under_test() -> tuple[str, ...]:
    """The pinned releases plus the newest one."""
    newest = newest_release()
    return PINNED_RELEASES + (() if newest in PINNED_RELEASES else (newest,))


def wheel(version: str) -> Path:
    """The cached wheel of ``version``, downloaded when missing."""
    cache = wheel_cache()
    found = sorted(cache.glob(f"tpu_inference-{version}-*.whl"))
    if found:
        return found[0]
    out = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"tpu-inference=={version}", "-d", str(cache)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    found = sorted(cache.glob(f"tpu_inference-{version}-*.whl"))
    if not found:
        pytest.fail(f"could not download tpu-inference=={version}: {out.stderr.strip()[-500:]}")
    return found[0]


def unpack(version: str, dest: Path) -> Path:
    """Unpack the wheel of ``version`` into ``dest`` (an unpacked-wheel target); return ``dest``."""
    with zipfile.ZipFile(wheel(version)) as archive:
        archive.extractall(dest)
    return dest


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes): for byte-exact comparisons."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class _Stub(types.ModuleType):
    """A stand-in module: any attribute is a permissive placeholder class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        placeholder = type(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: None})
        setattr(self, name, placeholder)
        return placeholder


class _StubFinder:
    """Meta-path finder serving :class:`_Stub` modules for the stood-in top-level packages."""

    roots = ("vllm", "torch", "torchax")

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)  # type: ignore[arg-type]

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _Stub(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]
        if spec.name == "vllm.logger":
            module.init_logger = logging.getLogger  # type: ignore[attr-defined]
            module._VllmLogger = logging.Logger  # type: ignore[attr-defined]
        if spec.name == "vllm.config.model":
            module.PROCESSED_LOGPROBS_MODES = ("processed_logprobs", "processed_logits")  # type: ignore[attr-defined]
        if spec.name == "vllm.v1.outputs":

            class LogprobsTensors(NamedTuple):
                logprob_token_ids: Any
                logprobs: Any
                selected_token_ranks: Any

            module.LogprobsTensors = LogprobsTensors  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _is_ours(name: str) -> bool:
    return name.split(".")[0] in ("tpu_inference", "vllm", "torch", "torchax")


@contextlib.contextmanager
def import_tpu_sampling(tree: Path) -> Iterator[types.ModuleType]:
    """Import ``tpu_inference.layers.jax.sample.sampling`` from the unpacked tree at ``tree``.

    Inside the block the module (and its real ``tpu_inference`` dependencies) are in ``sys.modules``;
    on exit they are removed again, so two trees (original and patched) can be imported in turn.
    """
    package_root = tree / "tpu_inference"
    saved = {k: v for k, v in sys.modules.items() if _is_ours(k)}
    for key in saved:
        del sys.modules[key]
    finder = _StubFinder()
    sys.meta_path.insert(0, finder)
    # Package modules without running their __init__ (platform probing); submodules load for real.
    for folder in [package_root, *[p for p in package_root.rglob("*") if p.is_dir() and (p / "__init__.py").exists()]]:
        name = ".".join(("tpu_inference", *folder.relative_to(package_root).parts))
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]  # type: ignore[attr-defined]
        package.__package__ = name
        sys.modules[name] = package
    try:
        yield importlib.import_module("tpu_inference.layers.jax.sample.sampling")
    finally:
        sys.meta_path.remove(finder)
        for key in [k for k in sys.modules if _is_ours(k)]:
            del sys.modules[key]
        sys.modules.update(saved)


def copy_tree(src: Path, dest: Path) -> Path:
    """A fresh copy of ``src`` at ``dest``."""
    shutil.copytree(src, dest)
    return dest
