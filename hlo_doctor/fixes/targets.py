"""Target detection: which project a directory holds, in which form, and which release.

A target is one of
- an installed ``tpu_inference`` package directory (``site-packages/tpu_inference``),
- an unpacked tpu-inference wheel (the folder holding ``tpu_inference/`` and its ``.dist-info``),
- a git checkout of tpu-inference (``.git`` + ``tpu_inference/``),
- the hlo-doctor reference engine's source tree (``hlo_doctor/engine/`` or a copy of it, or a
  repository root holding one).

Releases come from the wheel METADATA (installed or unpacked), the checkout's ``pyproject.toml`` /
version file / ``git describe``, or the engine's own version.
"""

from __future__ import annotations

import email.parser
import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.core.errors import InputError

TPU_INFERENCE = "tpu-inference"
ENGINE = "hlo-doctor-engine"

# Role -> path inside the ``tpu_inference`` package.
_TPU_INFERENCE_FILES = {
    "runner": Path("runner/tpu_runner.py"),
    "sampler": Path("layers/jax/sample/sampling.py"),
    "precompile": Path("runner/compilation_manager.py"),
}
# Role -> path inside the engine package.
_ENGINE_FILES = {
    "runner": Path("runner.py"),
    "sampler": Path("sampling.py"),
    "precompile": Path("compilation_manager.py"),
}


@dataclass(frozen=True, slots=True)
class Target:
    """A detected source tree.

    ``root`` is where the manifest lives (``root/.hlo-doctor/fixes/``) and what paths in diffs are
    relative to; ``package_dir`` the Python package the fix edits; ``files`` maps a role
    (``runner``, ``sampler``, ``precompile``) to its file.
    """

    project: str
    kind: str
    root: Path
    package_dir: Path
    release: str
    files: tuple[tuple[str, Path], ...]

    def file(self, role: str) -> Path:
        """The file that plays ``role``."""
        return dict(self.files)[role]

    def rel(self, path: Path) -> str:
        """``path`` relative to the root, as written in diffs and manifests."""
        return path.relative_to(self.root).as_posix()


def detect_target(path: Path) -> Target:
    """Detect what ``path`` holds; raise :class:`InputError` (one line) when it is none of the kinds."""
    if not path.exists():
        raise InputError(f"target {path} does not exist", "pass a tpu-inference tree or the engine's source")
    if not path.is_dir():
        raise InputError(
            f"target {path} is not a directory",
            "pass the tpu_inference package directory, a checkout, an unpacked wheel or the engine tree",
        )
    root = path.resolve()

    # The tpu_inference package directory itself (installed, or inside an unpacked wheel).
    if _is_tpu_inference_package(root):
        dist_info = _find_dist_info(root.parent)
        if dist_info is not None:
            in_site = root.parent.name in ("site-packages", "dist-packages")
            kind = "installed package" if in_site else "package in an unpacked wheel"
            return _tpu_target(kind, root, root, _release_from_metadata(dist_info))
        checkout = root.parent
        if (checkout / ".git").exists():
            return _tpu_target("package in a git checkout", root, root, _release_from_checkout(checkout))
        return _tpu_target("package directory", root, root, "unknown")

    inner = root / "tpu_inference"
    if _is_tpu_inference_package(inner):
        if (root / ".git").exists():
            return _tpu_target("git checkout", root, inner, _release_from_checkout(root))
        dist_info = _find_dist_info(root)
        if dist_info is not None:
            return _tpu_target("unpacked wheel", root, inner, _release_from_metadata(dist_info))
        return _tpu_target("source tree", root, inner, _release_from_checkout(root))

    for engine_dir, kind in ((root, "engine source tree"), (root / "hlo_doctor" / "engine", "engine in a checkout")):
        if _is_engine_package(engine_dir):
            return Target(
                project=ENGINE,
                kind=f"hlo-doctor reference engine ({kind})",
                root=root,
                package_dir=engine_dir,
                release=_engine_release(engine_dir),
                files=tuple((role, engine_dir / rel) for role, rel in _ENGINE_FILES.items()),
            )

    raise InputError(
        f"target {path} is not a tpu-inference tree nor the hlo-doctor reference engine",
        "expected tpu_inference/runner/tpu_runner.py (package, wheel or checkout) or the engine's "
        "runner.py + sampling.py + compilation_manager.py",
    )


def _tpu_target(kind: str, root: Path, package: Path, release: str) -> Target:
    return Target(
        project=TPU_INFERENCE,
        kind=f"tpu-inference {kind}",
        root=root,
        package_dir=package,
        release=release,
        files=tuple((role, package / rel) for role, rel in _TPU_INFERENCE_FILES.items()),
    )


def _is_tpu_inference_package(path: Path) -> bool:
    return path.name == "tpu_inference" and all((path / rel).is_file() for rel in _TPU_INFERENCE_FILES.values())


def _text(path: Path) -> str:
    """The text of ``path``; a file that is not UTF-8 is an :class:`InputError` (exit 2), not a crash."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text", "the target does not look like Python source; nothing was changed") from exc


def _is_engine_package(path: Path) -> bool:
    if not all((path / rel).is_file() for rel in _ENGINE_FILES.values()):
        return False
    # A tpu-inference runner directory also has a compilation_manager.py; the engine is told apart
    # by its runner defining the sampling step and the package naming itself.
    try:
        runner = _text(path / "runner.py")
    except OSError:
        return False
    return "_sample_from_logits" in runner and not (path / "tpu_runner.py").exists()


def _find_dist_info(folder: Path) -> Path | None:
    candidates = sorted(folder.glob("tpu_inference-*.dist-info")) + sorted(folder.glob("tpu-inference-*.dist-info"))
    return candidates[0] if candidates else None


def _release_from_metadata(dist_info: Path) -> str:
    metadata = dist_info / "METADATA"
    try:
        message = email.parser.Parser().parsestr(_text(metadata), headersonly=True)
    except OSError:
        message = None
    if message is not None and message.get("Version"):
        return str(message["Version"]).strip()
    match = re.match(r"tpu[-_]inference-(.+)\.dist-info", dist_info.name)
    return match.group(1) if match else "unknown"


def _release_from_checkout(checkout: Path) -> str:
    pyproject = checkout / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(_text(pyproject))
            version = data.get("project", {}).get("version")
            if isinstance(version, str):
                return version
        except (OSError, tomllib.TOMLDecodeError):
            pass
    for rel in ("tpu_inference/version.py", "tpu_inference/_version.py"):
        version_file = checkout / rel
        if version_file.is_file():
            match = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", _text(version_file))
            if match:
                return match.group(1)
    if (checkout / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(checkout), "describe", "--tags", "--always"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            if out.returncode == 0 and out.stdout.strip():
                return f"git {out.stdout.strip()}"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "unknown"


def _engine_release(engine_dir: Path) -> str:
    init = engine_dir / "__init__.py"
    if init.is_file():
        match = re.search(
            r"""^(?:__version__|ENGINE_VERSION)\s*=\s*["']([^"']+)["']""",
            _text(init),
            re.MULTILINE,
        )
        if match:
            return f"engine {match.group(1)}"
    from hlo_doctor import __version__

    return f"engine (hlo-doctor {__version__})"
