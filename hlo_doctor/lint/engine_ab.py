"""A fix's promise measured on the engine a capture profiled, with and without the fix (an engine A/B).

Where the capture is a run directory of ``hlo-doctor profile`` of the bundled engine (or an engine
tree, ``--engine PATH``) and this machine can run what it ran (the capture's jax and jaxlib; every
engine file run.json fingerprinted still as it was), ``verify``'s engine A/B
(:mod:`hlo_doctor.verify.engine.promise`) times the engine at the capture's sizes and a patched copy
of its tree in alternating rounds, and verify's step-time statistic gives the figure, shown as a
program A/B (:class:`~.program_ab.ProgramMeasurement`). A tree fix (``bf16-greedy-sampler``)
removes findings that have no source line of their own (HD002's copy): the A/B times the whole
fix, so their time is in the figure. This module finds the engine and keys the measurement; it
imports nothing of ``verify``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.model import Finding
from hlo_doctor.core.sources import file_sha256, recorded
from hlo_doctor.lint.activity import measuring
from hlo_doctor.lint.measurement import DEFAULT_BUDGET_S, Measurement
from hlo_doctor.lint.program_ab import ProgramMeasurement, from_measurement, other_jax

KIND = "engine-ab/fix"
"""The measurement store's kind for an engine A/B."""
VERIFIED_KIND = "engine-ab/verify"
"""The store's kind for verify's own rounds of the same fix on the same engine (``doctor`` keeps them
with its baseline profile): read before an A/B of :data:`KIND` is measured, as the longer run."""
BUDGET_S = DEFAULT_BUDGET_S
"""Seconds the measured rounds may take in all (verify's ``--budget``), as the program A/B's."""
ROUNDS = 3
"""Pairs of rounds before the first look (the fewest verify's statistic tests); every decode step of
each round's offline batch is timed."""
TPU_INFERENCE = "tpu_inference/"
"""What a finding's source path holds when the capture ran tpu-inference."""
SIZES = ("batch", "vocab_size", "num_layers", "max_tokens")

if TYPE_CHECKING:
    from hlo_doctor.lint.promise import FixPromise
    from hlo_doctor.lint.store import MeasurementStore


@dataclass(frozen=True, slots=True)
class EngineTarget:
    """The engine a capture profiled, as this machine would run it again."""

    source: Path
    """The engine tree's folder (the bundled engine's own for ``profile`` with no target)."""
    bundled: bool
    config: dict[str, Any]
    """The engine configuration run.json recorded (sizes, dtypes, sampling)."""
    backend: str
    sources: str
    """A digest of every ``*.py`` of the tree now (what the key names: an edit measures again)."""

    @property
    def label(self) -> str:
        """``the bundled engine (batch 64, vocab 256000, 2 layers, 16 tokens)``."""
        c = self.config
        sizes = ", ".join(f"{name} {c[key]}" for name, key in (("batch", "batch"), ("vocab", "vocab_size"),
                                                              ("layers", "num_layers"), ("tokens", "max_tokens"))
                          if key in c)
        return f"{'the bundled engine' if self.bundled else f'the engine at {self.source}'} ({sizes})"


Measure = Callable[[str, EngineTarget, str, float], "Measurement | str"]
"""``(fix, the engine, store key, budget) -> the stored figure or why not``: verify's engine A/B
(:func:`hlo_doctor.verify.engine.promise.measure`), passed in by the caller."""


def engine_target(capture: Path, bundled_dir: Path | None = None) -> EngineTarget | str | None:
    """The engine of a capture this machine can time; the one-line reason where it cannot; None where
    the capture is not of an engine. ``bundled_dir``: the bundled engine's folder here (a tree at
    that folder is run as the bundled engine)."""
    from hlo_doctor.lint.store import run_doc, run_folder

    folder = run_folder(capture)
    doc = run_doc(folder)
    if doc is None:
        return None
    target = doc.get("target")
    if not isinstance(target, str) or not (target == "engine" or target.startswith("engine:")):
        return None
    found = doc.get("config")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    config = meta.get("config") if isinstance(meta.get("config"), dict) else None
    source = meta.get("source")
    if config is None or not isinstance(source, str) or not source:
        return "the capture's run.json does not name the engine's tree and configuration"
    other = other_jax(doc)
    if other:
        return other
    tree = Path(source)
    mine = {k: v for k, v in recorded(folder).items() if _inside(Path(k), tree)}
    if not mine:
        return ("the capture's run.json does not fingerprint the engine's files (a capture from before they "
                "were recorded), so this machine cannot tell they are unchanged: profile the engine again")
    if not (tree / "__init__.py").is_file():
        return "the engine tree the capture ran (run.json's config.source) is gone"
    for name, digest in sorted(mine.items()):
        now = file_sha256(Path(name))
        if now != digest:
            what = "is gone" if now is None else "changed"
            return f"{name} {what} since the capture: timing the engine now would not measure the captured one"
    bundled = bundled_dir is not None and _same(tree, bundled_dir)
    return EngineTarget(tree, bundled, dict(config), str(doc.get("backend") or ""), tree_digest(tree))


def tpu_inference_reason(backend: str) -> str:
    """Why a tpu-inference capture's fix is not timed on what it ran, in one line."""
    ran = f" ran on {backend}" if backend else ""
    return (f"a capture of tpu-inference{ran}: this machine cannot run its server again (`hlo-doctor verify "
            "--target TREE --bench CMD` times the fix with a serving benchmark where it runs)")


def tree_digest(tree: Path) -> str:
    """SHA-256 over every ``*.py`` under ``tree`` (relative name and bytes' digest), sorted."""
    h = hashlib.sha256()
    for path in sorted(tree.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(f"{path.relative_to(tree).as_posix()}\0{file_sha256(path) or '-'}\n".encode())
    return h.hexdigest()


def key_for(fix: str, where: EngineTarget, budget_s: float) -> str:
    """What the store keys an engine A/B by (under the store's 400 characters): the fix, the engine's
    sizes, a digest of its whole configuration and of its sources, the rounds and budget."""
    return f"engine A/B of {_what(fix, where)}; {ROUNDS} rounds, budget {budget_s:g} s"


def verified_key(fix: str, where: EngineTarget) -> str:
    """What the store keys verify's own rounds of ``fix`` (the ``full`` variant) on the engine by."""
    return f"verify of {_what(fix, where)}; full variant"


def _what(fix: str, where: EngineTarget) -> str:
    c = where.config
    sizes = ", ".join(f"{k} {c[k]}" for k in SIZES if k in c)
    config = hashlib.sha256(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest()
    return (f"{'the bundled engine' if where.bundled else 'an engine tree'} with {fix[:60]}; {sizes[:120]}; "
            f"config sha256:{config[:16]}; sources sha256:{where.sources[:16]}")


def with_engine_ab(capture: Path, promises: tuple[FixPromise, ...], findings: Iterable[Finding],
                   store: MeasurementStore | None, measure: Measure, *, backend: str = "",
                   bundled_dir: Path | None = None, budget_s: float = BUDGET_S) -> tuple[FixPromise, ...]:
    """``promises`` with each fix measured by an engine A/B here: read from ``store``, else measured by
    ``measure`` and kept there; where none can run, each says why (``program_unmeasured``): a capture
    of tpu-inference (its findings' lines are in its tree) included. A capture of neither: ``promises``
    as they are."""
    where = engine_target(capture, bundled_dir or bundled_engine_dir()) if promises else None
    if where is None:
        if promises and any(TPU_INFERENCE in f.source.replace("\\", "/") for f in findings if f.source):
            return tuple(p if p.program is not None or p.program_unmeasured else
                         replace(p, program_unmeasured=tpu_inference_reason(backend)) for p in promises)
        return promises
    if isinstance(where, str):
        return tuple(replace(p, program_unmeasured=where) for p in promises)
    out = []
    for p in promises:
        key = key_for(p.fix, where, budget_s)
        # verify's rounds of this fix on this engine (doctor's), where kept: the longer run of the two.
        verified = store.lookup(VERIFIED_KIND, verified_key(p.fix, where)) if store is not None else None
        stored = verified or (store.lookup(KIND, key) if store is not None else None)
        if stored is None:
            with measuring(f"measuring {p.fix}: an A/B of {where.label} ({budget_s:g} s budget)"):
                made = measure(p.fix, where, key, budget_s)
            if isinstance(made, str):
                out.append(replace(p, program_unmeasured=made))
                continue
            stored = made
            if store is not None:
                store.record(made)
        got = from_measurement(p.fix, where.label, (), stored)
        out.append(replace(p, program=got) if isinstance(got, ProgramMeasurement)
                   else replace(p, program_unmeasured=got))
    return tuple(sorted(out, key=lambda p: (-p.net_us, p.fix)))


def bundled_engine_dir() -> Path | None:
    """The bundled engine's folder here, found without importing it (nor jax)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("hlo_doctor.engine")
    except (ImportError, ValueError):
        return None
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _inside(path: Path, tree: Path) -> bool:
    try:
        path.resolve().relative_to(tree.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False
