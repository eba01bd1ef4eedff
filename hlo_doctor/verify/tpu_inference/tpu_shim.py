"""Importing the real ``sample()`` of a tpu-inference tree on any machine.

``tpu_inference.layers.jax.sample.sampling`` imports, through its own package, ``vllm``, ``torch``
and ``torchax``. Where those are installed they are used as they are. Where one is missing, a
temporary shim package is written for it, holding exactly the names that the import path of
``sampling.py`` reads from it: the chain of ``tpu_inference`` modules is followed statically (module
level imports, not ``if TYPE_CHECKING:`` blocks), every ``from vllm.x import A`` gives ``A`` and
every ``alias.B`` read on an imported ``vllm``/``torch`` module gives ``B``. The shim goes on
``sys.path`` for the import only, and what it stood in for is reported.

The ``tpu_inference`` package ``__init__`` files are not run (they probe the TPU platform); every
module on the import path is the tree's own. Nothing of JAX is stood in for.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SAMPLING_MODULE = "tpu_inference.layers.jax.sample.sampling"
METADATA_MODULE = "tpu_inference.layers.jax.sample.sampling_metadata"
STAND_IN_ROOTS = ("vllm", "torch", "torchax")

# Names whose use at import time needs more than a placeholder class.
_SPECIAL = {
    ("vllm.logger", "init_logger"): "import logging\ninit_logger = logging.getLogger\n",
    ("vllm.logger", "_VllmLogger"): "import logging\n_VllmLogger = logging.Logger\n",
    ("vllm.config.model", "PROCESSED_LOGPROBS_MODES"):
        'PROCESSED_LOGPROBS_MODES = ("processed_logprobs", "processed_logits")\n',
    ("vllm.v1.outputs", "LogprobsTensors"):
        "from typing import Any, NamedTuple\n\n\nclass LogprobsTensors(NamedTuple):\n"
        "    logprob_token_ids: Any\n    logprobs: Any\n    selected_token_ranks: Any\n",
}


@dataclass(frozen=True, slots=True)
class ImportedSampler:
    """The real ``sampling`` and ``sampling_metadata`` modules of one tree, and what was stood in for."""

    sampling: types.ModuleType
    metadata: types.ModuleType
    stood_in: tuple[str, ...]
    """``vllm.v1.outputs.LogprobsTensors``... : the names the shim provided (empty: all installed)."""


def _module_file(package_dir: Path, name: str) -> Path | None:
    parts = name.split(".")[1:]
    base = package_dir.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: not in functions, not under ``if TYPE_CHECKING``."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "TYPE_CHECKING" not in test:
                stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + [s for h in node.handlers for s in h.body] + node.orelse + node.finalbody)


def needed_names(package_dir: Path, missing_roots: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> names that the import path of ``sampling.py`` reads from the ``missing_roots`` packages."""
    needs: dict[str, set[str]] = {}
    seen: set[str] = set()
    queue = [SAMPLING_MODULE, METADATA_MODULE]
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(package_dir, name)
        if path is None:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases: dict[str, str] = {}  # local name -> stood-in module it is bound to
        for node in _top_level_imports(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    root = a.name.split(".")[0]
                    if root == "tpu_inference":
                        queue.append(a.name)
                    elif root in missing_roots:
                        needs.setdefault(a.name, set())
                        aliases[a.asname or root] = a.name if a.asname else root
                continue
            module = node.module or ""
            root = module.split(".")[0]
            if root == "tpu_inference":
                for a in node.names:
                    sub = f"{module}.{a.name}"
                    queue.append(sub if _module_file(package_dir, sub) is not None else module)
            elif root in missing_roots:
                names = needs.setdefault(module, set())
                for a in node.names:
                    names.add(a.name)
                    aliases[a.asname or a.name] = f"{module}.{a.name}"
        # Attributes read on a stood-in module or class anywhere in the file: ``torch.float32``.
        for attr in ast.walk(tree):
            if isinstance(attr, ast.Attribute) and isinstance(attr.value, ast.Name) and attr.value.id in aliases:
                needs.setdefault(aliases[attr.value.id], set()).add(attr.attr)
    return needs


def _shim_files(needs: dict[str, set[str]]) -> dict[str, str]:
    """Relative path -> source of the shim packages for ``needs``."""
    files: dict[str, list[str]] = {}
    modules = set(needs)
    # A name imported from a module may itself be a module (``from vllm import envs``): give it its
    # own file when other names are read on it.
    for module, names in list(needs.items()):
        for n in names:
            if f"{module}.{n}" in needs:
                modules.add(f"{module}.{n}")
    for module in sorted(modules):
        parts = module.split(".")
        for i in range(1, len(parts)):
            files.setdefault("/".join(parts[:i]) + "/__init__.py", [])
        files.setdefault("/".join(parts) + "/__init__.py", [])
    for module in sorted(modules):
        body = files["/".join(module.split(".")) + "/__init__.py"]
        body.append('"""Stand-in written by hlo-doctor: only the names tpu-inference\'s sampler imports."""\n')
        for n in sorted(needs.get(module, ())):
            if f"{module}.{n}" in modules:
                body.append(f"from {module} import {n}\n")
            elif (module, n) in _SPECIAL:
                body.append(_SPECIAL[(module, n)])
            else:
                attrs = sorted(needs.get(f"{module}.{n}", ()))
                members = "".join(f"    {a} = None\n" for a in attrs) or "    pass\n"
                body.append(f"\n\nclass {n}:\n{members}\n    def __init__(self, *args, **kwargs):\n        pass\n")
    return {path: "".join(text) for path, text in files.items()}


def missing_roots() -> tuple[str, ...]:
    """The stood-in packages that are not installed here."""
    return tuple(r for r in STAND_IN_ROOTS if importlib.util.find_spec(r) is None)


def _is_ours(name: str, roots: tuple[str, ...]) -> bool:
    return name.split(".")[0] in ("tpu_inference", *roots)


@contextlib.contextmanager
def import_sampler(package_dir: Path) -> Iterator[ImportedSampler]:
    """Import ``sampling.py`` (and its metadata module) of the ``tpu_inference`` package at ``package_dir``.

    Inside the block the tree's modules are in ``sys.modules``; on exit they (and any shim) are
    removed again, so two trees can be imported in turn. Functions taken out of the modules keep
    working after the block (they hold their own globals).
    """
    roots = missing_roots()
    needs = needed_names(package_dir, roots) if roots else {}
    shim = Path(tempfile.mkdtemp(prefix="hlo-doctor-shim-"))
    for rel, text in _shim_files(needs).items():
        (shim / rel).parent.mkdir(parents=True, exist_ok=True)
        (shim / rel).write_text(text)
    saved = {k: v for k, v in sys.modules.items() if _is_ours(k, roots)}
    for key in saved:
        del sys.modules[key]
    sys.path.insert(0, str(shim))
    # Importing must not write into the tree (no __pycache__ in the user's install or checkout).
    write_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    # Package modules without running their __init__ (platform probing); submodules load for real.
    for folder in [package_dir, *[p for p in package_dir.rglob("*") if p.is_dir() and (p / "__init__.py").exists()]]:
        name = ".".join(("tpu_inference", *folder.relative_to(package_dir).parts))
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]  # type: ignore[attr-defined]
        package.__package__ = name
        sys.modules[name] = package
    try:
        stood_in = tuple(sorted(f"{m}.{n}" for m, names in needs.items() for n in names
                                if f"{m}.{n}" not in needs) + sorted(m for m, names in needs.items() if not names))
        yield ImportedSampler(importlib.import_module(SAMPLING_MODULE), importlib.import_module(METADATA_MODULE),
                              stood_in)
    finally:
        sys.path.remove(str(shim))
        sys.dont_write_bytecode = write_bytecode
        for key in [k for k in sys.modules if _is_ours(k, roots)]:
            del sys.modules[key]
        sys.modules.update(saved)
        shutil.rmtree(shim, ignore_errors=True)
