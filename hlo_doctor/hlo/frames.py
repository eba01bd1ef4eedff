"""Stack frames of HLO instructions, the frameworks a person does not edit, and the line they do.

JAX writes the Python stack of every traced op into the HLO metadata (``stack_frame_id`` into the
module's ``FileNames`` / ``FunctionNames`` / ``FileLocations`` / ``StackFrames`` tables, printed after
the header); older captures name one ``source_file``/``source_line``. The parser keeps the whole
stack, **innermost frame first** (the op's own line, then its caller, ... out to the program's
entry point), as SARIF's ``stack.frames`` orders them.

The innermost frame is often a framework's internals (keras' ``backend/jax/nn.py``, flax's
``linen/linear.py``): what a person edits is the first frame outside the frameworks, which
:func:`editable_frame` finds. Frameworks are matched by their dotted module path, worked out from
the file's path: the part after ``site-packages/`` (or ``dist-packages/``), after the standard
library's ``lib/pythonX.Y/``, the path from the topmost package folder (``__init__.py``) when the
file is on this machine, or from the working folder. People see paths as
:func:`hlo_doctor.core.format.fmt_path` writes them (relative to the package root). :data:`DEFAULT_FRAMEWORKS` lists them; ``[tool.hlo-doctor] frameworks``
adds more (:func:`set_extra_frameworks`). A model library (transformers' ``modeling_flax_gpt2.py``,
keras-hub's models, samplers and layers, recurrentgemma) is code a person edits and is not listed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import PurePosixPath
from typing import NamedTuple

from hlo_doctor.core.format import fmt_path, path_roots

__all__ = [
    "DEFAULT_FRAMEWORKS", "Frame", "editable_frame", "extra_frameworks", "format_frame", "framework_of",
    "frameworks", "module_of", "set_extra_frameworks", "source_frame",
]


class Frame(NamedTuple):
    """One frame of an op's Python stack: ``(file, line, function)``; line 0 and function "" when unknown."""

    file: str
    line: int
    function: str = ""


DEFAULT_FRAMEWORKS: tuple[str, ...] = (
    # Array and model frameworks: their internals are never the line to edit.
    "jax", "jaxlib", "jax_plugins", "flax", "keras", "tf_keras", "optax", "numpy", "ml_dtypes", "torchax",
    "equinox", "haiku", "chex", "orbax", "opt_einsum", "einops", "scipy", "tensorflow", "torch", "torch_xla",
    # Wrappers that type-check or decorate a model's functions (their frames sit between its lines).
    "jaxtyping", "typeguard", "beartype",
    # What runs a program without being it: CLIs, test runners, notebooks, and this tool's capture.
    "click", "absl", "_pytest", "pytest", "pluggy", "xdist", "execnet", "IPython", "ipykernel", "hlo_doctor.capture",
    "hlo_doctor.capture_guard", "hlo_doctor.cli",
)
"""Dotted module prefixes whose frames are framework internals (a prefix matches itself and its
submodules: ``keras`` matches ``keras.src.backend.jax.nn``). The Python standard library, frozen
modules (``<frozen runpy>``) and console-script wrappers (``bin/hlo-doctor``) count as ``python``."""

_extra: tuple[str, ...] = ()
_PY_SUFFIXES = (".py", ".pyc", ".pyx", ".pyi")


def set_extra_frameworks(names: Iterable[str]) -> None:
    """Add ``names`` (dotted module prefixes, ``mylib.internal``; ``/`` is read as ``.``) to the
    default frameworks, replacing what an earlier call added. ``[tool.hlo-doctor] frameworks`` lands
    here."""
    global _extra
    cleaned = tuple(dict.fromkeys(n.strip().strip("/.").replace("/", ".") for n in names if n.strip().strip("/.")))
    if cleaned != _extra:
        _extra = cleaned
        _framework_cached.cache_clear()


def extra_frameworks() -> tuple[str, ...]:
    """What :func:`set_extra_frameworks` added (empty by default)."""
    return _extra


def frameworks() -> tuple[str, ...]:
    """Every framework prefix in use: the defaults, then the configured ones."""
    return DEFAULT_FRAMEWORKS + _extra


def _dotted(rel: str) -> str:
    parts = list(PurePosixPath(rel).parts)
    if not parts:
        return ""
    last = parts[-1]
    for suffix in _PY_SUFFIXES:
        if last.endswith(suffix):
            last = last[: -len(suffix)]
            break
    parts[-1] = last
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_of(path: str) -> str:
    """The dotted module path a file is imported as (``keras.src.backend.jax.nn``), "" when unknown.

    From the part after ``site-packages/``, the standard library's folder, the topmost package
    folder on this machine, or the working folder, in that order (:func:`hlo_doctor.core.format.path_roots`).
    """
    roots = path_roots(path)
    return _dotted(roots.installed or roots.stdlib or roots.package or roots.cwd)


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@lru_cache(maxsize=8192)
def _framework_cached(path: str, cwd: str) -> str:
    p = path.replace("\\", "/")
    roots = path_roots(path)
    if p.startswith("<") or roots.stdlib:
        return "python"
    name = PurePosixPath(p)
    if name.parent.name in ("bin", "Scripts") and not name.name.endswith(_PY_SUFFIXES):
        return "python"  # a console-script wrapper (``.venv/bin/hlo-doctor``)
    module = _dotted(roots.installed or roots.package or roots.cwd)
    if module:
        best = max((f for f in frameworks() if _matches(module, f)), key=len, default="")
        if best:
            return best
    # A path from another machine whose package root is unknown: configured prefixes still match
    # by consecutive folder names (``mylib.internal`` in ``/x/mylib/internal/ops.py``). The defaults
    # do not: ``recurrentgemma/jax/layers.py`` is not jax.
    parts = [*name.parent.parts, name.stem]
    for prefix in _extra:
        want = prefix.split(".")
        if any(parts[i:i + len(want)] == want for i in range(len(parts) - len(want) + 1)):
            return prefix
    return ""


def framework_of(path: str) -> str:
    """The framework whose internals ``path`` is (``jax``, ``keras``, ``python`` for the standard
    library, a configured prefix), or "" for code a person edits (theirs, or a model library's)."""
    return _framework_cached(path, os.getcwd()) if path else "python"


def editable_frame(stack: Sequence[Frame]) -> Frame | None:
    """The innermost frame outside the frameworks: the line a person edits. None when every frame
    is a framework's (or the stack is empty)."""
    return next((f for f in stack if f.file and not framework_of(f.file)), None)


def source_frame(stack: Sequence[Frame]) -> Frame | None:
    """The frame a finding and the op-stats ``source`` show: :func:`editable_frame`, else the
    innermost frame (the framework's own line, when the stack holds nothing else)."""
    if not stack:
        return None
    return editable_frame(stack) or stack[0]


def format_frame(frame: Frame) -> str:
    """``keras/src/ops/nn.py:1122 in softmax`` (display path, line, function)."""
    where = fmt_path(frame.file) + (f":{frame.line}" if frame.line else "")
    return f"{where} in {frame.function}" if frame.function else where
