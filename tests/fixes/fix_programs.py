"""Helpers of the fix-on-a-program tests: copy a program, fix the copy through the real transaction,
import both side by side, compare outputs bit for bit, count a rule's findings on compiled HLO."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
import pytest

from hlo_doctor.fixes import FixApplied
from hlo_doctor.fixes.source.apply import apply_source_fix
from hlo_doctor.fixes.source.base import Hint
from hlo_doctor.lint import diagnose, load_context, load_rulebook

PROGRAMS = Path(__file__).parent / "programs"
SEEDS = (0, 1, 2, 3)
BOOK = load_rulebook()


def load_module(path: Path, name: str) -> ModuleType:
    """The Python file ``path`` imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def line_of(path: Path, text: str) -> int:
    """The first line of ``path`` holding ``text`` (1-based)."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def fixed_pair(tmp_path: Path, program: str, fix_id: str, sites: list[tuple[str, Hint]]) -> tuple[ModuleType, ModuleType,
                                                                                                FixApplied]:
    """The program as written and fixed, both imported."""
    before, after = tmp_path / "before" / program, tmp_path / "after" / program
    for p in (before, after):
        p.parent.mkdir()
        shutil.copy(PROGRAMS / program, p)
    result = apply_source_fix(fix_id, after, [(line_of(after, text), hint) for text, hint in sites], unsafe=True)
    assert isinstance(result, FixApplied), result
    assert after.read_text() != before.read_text()
    stem = f"{program[:-3]}_{fix_id.replace('-', '_')}"
    return load_module(before, f"{stem}_before"), load_module(after, f"{stem}_after"), result


def bits(outputs: tuple[Any, ...]) -> list[tuple[str, tuple[int, ...], bytes]]:
    """Each output's dtype, shape and bytes."""
    return [(str(np.asarray(o).dtype), np.asarray(o).shape, np.asarray(o).tobytes()) for o in outputs]


def same_outputs(before: ModuleType, after: ModuleType) -> None:
    """Both programs' ``outputs(seed)`` are the same bit for bit for every seed of ``SEEDS``."""
    for seed in SEEDS:
        assert bits(before.outputs(seed)) == bits(after.outputs(seed)), f"seed {seed}"


def count_findings(tmp_path: Path, code: str, name: str, compiled: Callable[[], Any]) -> int:
    """Findings of rule ``code`` on the optimized HLO of ``compiled()``."""
    path = tmp_path / f"{name}.hlo.txt"
    path.write_text(compiled().compile().as_text())
    return sum(1 for f in diagnose(load_context(path), BOOK, select=[code]).findings if f.code == code)


@pytest.fixture(autouse=True)
def forget_modules() -> Iterator[None]:
    """Drop the imported copies and jax's caches after each test."""
    yield
    for name in [n for n in sys.modules if n.endswith(("_before", "_after"))]:
        del sys.modules[name]
    jax.clear_caches()
