"""Loading an engine tree: the bundled reference engine, or any copy of its source tree from a directory.

A patched tree (``hlo-doctor apply-fix --target DIR``) loads under a package name of its own, so the
original and the patched engine run side by side in one process (``hlo-doctor verify``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from hlo_doctor.core.errors import InputError

# What an engine tree must provide, as files and as names on the loaded package.
ENGINE_FILES = ("__init__.py", "runner.py", "sampling.py", "sampling_metadata.py", "compilation_manager.py")
ENGINE_API = ("EngineConfig", "EngineConfigError", "validate", "profile_target", "run_offline_batch")

_loaded: dict[Path, ModuleType] = {}


def _engine_dir(path: Path) -> Path:
    """The directory holding the engine modules: ``path`` itself or ``path/hlo_doctor/engine``."""
    for candidate in (path, path / "engine", path / "hlo_doctor" / "engine"):
        if candidate.is_dir() and all((candidate / name).is_file() for name in ENGINE_FILES):
            return candidate.resolve()
    missing = [name for name in ENGINE_FILES if not (path / name).is_file()]
    raise InputError(
        f"{path} is not an engine source tree (missing {', '.join(missing)})",
        "give a directory laid out like hlo_doctor/engine/ (or a checkout containing hlo_doctor/engine/)",
    )


def load_engine(path: str | Path | None = None) -> ModuleType:
    """The engine package: the installed ``hlo_doctor.engine`` for ``None``, else the tree at ``path``.

    A tree is loaded once per process under a unique package name derived from its resolved path;
    its modules import each other relatively, so they bind to that tree and not to the installed one.
    """
    if path is None:
        return importlib.import_module("hlo_doctor.engine")
    root = Path(path).expanduser()
    if not root.exists():
        raise InputError(f"engine path {root} does not exist", "give the directory of an engine source tree")
    if not root.is_dir():
        raise InputError(f"engine path {root} is not a directory", "give the directory of an engine source tree")
    engine_dir = _engine_dir(root)
    if engine_dir in _loaded:
        return _loaded[engine_dir]
    digest = hashlib.sha1(str(engine_dir).encode()).hexdigest()[:12]
    name = f"hlo_doctor_engine_{digest}"
    spec = importlib.util.spec_from_file_location(
        name, engine_dir / "__init__.py", submodule_search_locations=[str(engine_dir)]
    )
    if spec is None or spec.loader is None:
        raise InputError(f"cannot load {engine_dir / '__init__.py'}", "check the engine tree")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise InputError(
            f"engine tree {engine_dir} does not compile: {exc.filename}:{exc.lineno}: {exc.msg}",
            "fix or re-create the patched tree",
        ) from exc
    except ImportError as exc:
        _forget(name)
        raise InputError(f"engine tree {engine_dir} failed to import: {exc}", "fix or re-create the patched tree") from exc
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the tree's import-time code may raise anything
        _forget(name)
        raise InputError(f"engine tree {engine_dir} raised {type(exc).__name__} on import: {exc}",
                         "fix or re-create the patched tree") from None
    missing_api = [attr for attr in ENGINE_API if not hasattr(module, attr)]
    if missing_api:
        sys.modules.pop(name, None)
        raise InputError(
            f"engine tree {engine_dir} lacks {', '.join(missing_api)}",
            "give a tree laid out like hlo_doctor/engine/",
        )
    _loaded[engine_dir] = module
    return module


def _forget(name: str) -> None:
    """Drop a half-imported engine package and its submodules, so a later load starts afresh."""
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        sys.modules.pop(key, None)


def engine_source_dir(engine: ModuleType) -> Path:
    """The directory a loaded engine package was read from."""
    return Path(engine.__file__).resolve().parent  # type: ignore[arg-type]
