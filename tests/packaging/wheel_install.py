"""The tool as users install it: a wheel and an sdist built from the tree, the wheel installed (not
editable) into a fresh virtual environment whose ``sys.path`` holds neither the checkout nor the
editable install's finder.

The fresh environment is created without system site-packages and without pip; the wheel goes in with
``pip --python NEW install --no-deps``. Its dependencies are the test environment's own installed
distributions, reached through one ``.pth`` line naming a folder of links to them: every entry of the
test environment's site-packages except hlo-doctor's (the editable finder and its ``.pth``), the other
``.pth`` files and the ``report`` extra (vl-convert-python), so the new environment is a plain install.
A path named in a ``.pth`` file is added to ``sys.path`` as it is; the ``.pth`` files inside it are not
run, so the editable finder cannot load there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"

# Left out of the new environment's view of the test environment: hlo-doctor itself (its editable
# finder, the .pth that loads it, its metadata), every .pth file, and the optional chart library.
_LEFT_OUT = ("hlo_doctor", "hlo-doctor", "__editable__", "vl_convert", "__pycache__")


@dataclass(frozen=True, slots=True)
class Built:
    """What ``python -m build`` made from a copy of the tree, and what it printed."""

    tree: Path
    wheel: Path
    sdist: Path
    output: str


@dataclass(frozen=True, slots=True)
class Installed:
    """A fresh environment holding the wheel; ``work`` is a folder outside the checkout to run in."""

    root: Path
    python: Path
    hlo_doctor: Path
    work: Path


def tree_files() -> list[str]:
    """The files of the tree as a clone holds them: tracked, plus new files git does not ignore."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        out = b""
    names = [n for n in out.decode().split("\0") if n and (REPO / n).is_file()]
    if names:
        return names
    # Not a git checkout (an unpacked sdist): every file but the caches and build outputs.
    skip = {".venv", ".git", "build", "dist", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "runs"}
    return [str(p.relative_to(REPO)) for p in REPO.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(REPO).parts) and not p.name.endswith(".egg-info")]


def copy_tree(dest: Path) -> Path:
    """A copy of the tree's files in ``dest`` (the build writes its egg-info there, not in the checkout)."""
    for name in tree_files():
        if name.startswith("sample_traces/"):
            continue  # 17 MB of captures no build reads
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return dest


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")}
    env.update(extra)
    return env


def build(tmp: Path) -> Built:
    """The sdist, then the wheel built from the unpacked sdist (``python -m build``'s default), without
    build isolation: the backend pyproject.toml asks for is in the test environment."""
    tree = copy_tree(tmp / "tree")
    dist = tmp / "dist"
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(tree)],
                          cwd=tmp, capture_output=True, text=True, timeout=300, env=_env())
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    return Built(tree, wheel, sdist, output)


def wheel_names(wheel: Path) -> set[str]:
    """The wheel's files, its ``.dist-info`` left out."""
    with zipfile.ZipFile(wheel) as zf:
        return {n for n in zf.namelist() if ".dist-info/" not in n}


def sdist_names(sdist: Path) -> set[str]:
    """The sdist's files, without the ``NAME-VERSION/`` folder they sit in."""
    with tarfile.open(sdist) as tf:
        return {m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile() and "/" in m.name}


def compiled_modules(tree: Path) -> set[str]:
    """The extension modules built from the tree's C sources (``hlo_doctor/trace/_xwire.c``), as the
    wheel names them; none where this machine has no C compiler (they are optional: setup.py)."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return set()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return {str(p.relative_to(tree).with_suffix("")) + suffix for p in (tree / "hlo_doctor").rglob("*.c")}


def expected_in_wheel(tree: Path) -> set[str]:
    """What the wheel must hold, read from the tree: every module of ``hlo_doctor/`` and of ``rules/``
    (as ``hlo_doctor/bundled_rules/``), the compiled reader and its C source (setuptools keeps a
    package's sources beside its modules), the typing marker and the XSpace proto."""
    names = {str(p.relative_to(tree)) for ext in ("py", "c") for p in (tree / "hlo_doctor").rglob(f"*.{ext}")}
    names |= {f"hlo_doctor/bundled_rules/{p.relative_to(tree / 'rules')}" for p in (tree / "rules").rglob("*.py")}
    return names | compiled_modules(tree) | {"hlo_doctor/py.typed", "hlo_doctor/trace/xplane.proto"}


def _site_packages() -> list[Path]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(Path(paths[k]) for k in ("purelib", "platlib")))


def install(wheel: Path, tmp: Path) -> Installed:
    """``wheel`` in a fresh environment under ``tmp`` (see the module's docstring)."""
    import venv

    root = tmp / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(root)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, env=_env()).stdout.strip())
    deps = tmp / "deps"
    deps.mkdir()
    for folder in _site_packages():
        for entry in folder.iterdir():
            if entry.name.startswith(_LEFT_OUT) or entry.suffix == ".pth" or (deps / entry.name).exists():
                continue
            (deps / entry.name).symlink_to(entry)
    (site / "test-environment-deps.pth").write_text(f"{deps}\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                           "--quiet", str(wheel)], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    work = tmp / "work"
    work.mkdir()
    return Installed(root, python, root / "bin" / "hlo-doctor", work)


def run(env: Installed, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``hlo-doctor ARGS`` from the fresh environment, in its work folder (outside the checkout)."""
    return subprocess.run([str(env.hlo_doctor), *args], cwd=env.work, capture_output=True, text=True,
                          timeout=timeout, env=_env(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2"))


def python(env: Installed, code: str) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` in the fresh environment, in its work folder."""
    return subprocess.run([str(env.python), "-c", code], cwd=env.work, capture_output=True, text=True, timeout=120,
                          env=_env(JAX_PLATFORMS="cpu"))
