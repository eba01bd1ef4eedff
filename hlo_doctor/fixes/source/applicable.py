"""Which fix applies to a finding's code: never one for another tree, never one that would not match.

A rule names the fixes that can remove what it flags (the catalog lists them per rule); whether one
applies to this finding is decided here, from the finding's Python stack:

- the frame must be a file a person edits: outside the frameworks (:mod:`hlo_doctor.hlo.frames`),
  on this machine, inside the project (``root``: the source root or the repository), and not an
  installed package (``site-packages``);
- a file fix applies when its codemod matches at that frame's line (a dry run, nothing written): at
  the innermost editable frame, or, for a fix that looks up the stack (``donate-state``: the jit of
  a loop is at the caller's level), at the first editable frame where it matches;
- a tree fix (``bf16-greedy-sampler``) applies when the frame's file is one of the files it edits in
  a project it recognises, and its own dry run on that project has something to do.

The finding then carries the fix's id (``fix``) and, in ``extra``, where it applies
(``fix_site``: ``path:line``), whether it is safe (``fix_safety``) and the command that applies it
(``fix_command``), which the text reports print.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path

from hlo_doctor.core.errors import HloDoctorError
from hlo_doctor.core.format import split_source
from hlo_doctor.core.model import Finding
from hlo_doctor.fixes import fix_applies
from hlo_doctor.fixes.catalog import CatalogEntry, catalog_entry, fixes_for_rule, load_source_fix
from hlo_doctor.fixes.source.base import NotApplicable, Rewritten
from hlo_doctor.fixes.source.lines import rewrite_at
from hlo_doctor.fixes.targets import Target, detect_target
from hlo_doctor.hlo.frames import framework_of

__all__ = ["FIX_COMMAND", "FIX_SAFETY", "FIX_SITE", "Applicable", "applicable_fix", "candidates", "editable_frames", "site_of",
           "with_applicable_fixes"]

FIX_SITE = "fix_site"
FIX_SAFETY = "fix_safety"
FIX_COMMAND = "fix_command"


@dataclasses.dataclass(frozen=True, slots=True)
class Applicable:
    """A fix that applies to a finding: its id, the file and line it changes there, whether it is safe."""

    fix_id: str
    path: Path
    line: int
    safe: bool


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return not any(part in ("site-packages", "dist-packages") for part in path.parts)


def editable_frames(finding: Finding, root: Path) -> Iterator[tuple[Path, int]]:
    """The finding's frames in files a person edits inside ``root``, innermost first."""
    frames: Iterable[tuple[str, int]] = [(file, line) for file, line, _ in finding.stack]
    if not finding.stack:
        src, at = split_source(finding.source)
        frames = [(src, at or 0)]
    root = root.resolve()
    for file, line in frames:
        if not file or not line or framework_of(file):
            continue
        try:
            path = (Path(file) if Path(file).is_absolute() else root / file).resolve()
        except OSError:
            continue
        if path.is_file() and _inside(path, root):
            yield path, line
        elif (here := _in_this_checkout(Path(file), root)) is not None:
            yield here, line


def _in_this_checkout(path: Path, root: Path) -> Path | None:
    """The same file in this project when the capture was made in another checkout of it (a TPU VM's
    ``/srv/app/pkg/mod.py`` is this tree's ``pkg/mod.py``): the longest tail of the path, of two parts
    or more, that names a file under ``root``."""
    parts = path.parts[1:] if path.is_absolute() else path.parts
    for k in range(len(parts), 1, -1):
        candidate = root.joinpath(*parts[-k:])
        if candidate.is_file() and _inside(candidate.resolve(), root):
            return candidate.resolve()
    return None


def candidates(finding: Finding) -> list[CatalogEntry]:
    """The catalog's fixes for the finding's rule (tree fixes first), and the one the rule named."""
    found = list(fixes_for_rule(finding.code))
    if finding.fix and all(e.fix_id != finding.fix for e in found):
        try:
            found.append(catalog_entry(finding.fix))
        except HloDoctorError:
            pass  # a user rule naming a fix this build does not have
    return found


class _Texts:
    """File texts read once per diagnosis."""

    def __init__(self) -> None:
        self.texts: dict[Path, str | None] = {}

    def get(self, path: Path) -> str | None:
        if path not in self.texts:
            try:
                self.texts[path] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                self.texts[path] = None
        return self.texts[path]


def _file_fix(entry: CatalogEntry, finding: Finding, frames: list[tuple[Path, int]], texts: _Texts) -> Applicable | None:
    fix = load_source_fix(entry.fix_id)
    hint = fix.hint(finding)
    tried = frames if fix.walks_stack else frames[:1]
    for i, (path, line) in enumerate(tried):
        text = texts.get(path)
        if text is None:
            continue
        others = tuple(ln for p, ln in frames[i + 1:] if p == path)
        at, outcome = rewrite_at(fix, text, line, dataclasses.replace(hint, lines=others))
        if isinstance(outcome, Rewritten):
            return Applicable(entry.fix_id, path, at, outcome.safe)
        if isinstance(outcome, NotApplicable) and outcome.kind != "no-pattern":
            return None  # the pattern is there and was refused: an outer frame is not this finding's code
    return None


def _tree_fix(entry: CatalogEntry, frames: list[tuple[Path, int]], root: Path) -> Applicable | None:
    if not frames:
        return None
    path, line = frames[0]
    for folder in path.parents:
        if not _inside(folder, root) and folder != root:
            break
        try:
            tree = detect_target(folder)
        except HloDoctorError:
            continue
        if path not in {p.resolve() for _, p in tree.files}:
            return None
        return Applicable(entry.fix_id, path, line, entry.safe) if _tree_dry_run(entry.fix_id, folder, tree) else None
    return None


# Whether a tree fix's dry run on a folder has something to do, per (fix, folder, the stat of each
# file it reads). Every finding the fix could remove asks the same question of the same folder, and
# the answer (a libcst analysis of the whole tree, no codemod: ~0.2 CPU s) only changes when one of those files does.
_DRY_RUNS: dict[tuple[str, Path, tuple[tuple[str, int, int], ...]], bool] = {}


def _tree_dry_run(fix_id: str, folder: Path, tree: Target) -> bool:
    """True when ``apply-fix FIX --dry-run`` on ``folder`` would change it (cached, see ``_DRY_RUNS``)."""
    try:
        stats = tuple((str(p), (st := p.stat()).st_mtime_ns, st.st_size) for _, p in tree.files)
    except OSError:
        stats = None
    key = (fix_id, folder.resolve(), stats) if stats is not None else None
    if key is not None and key in _DRY_RUNS:
        return _DRY_RUNS[key]
    applies = fix_applies(fix_id, folder)
    if key is not None:
        _DRY_RUNS[key] = applies
    return applies


def applicable_fix(finding: Finding, root: Path, texts: _Texts | None = None) -> Applicable | None:
    """The first of the finding's candidate fixes that applies to its code (module docstring)."""
    frames = list(editable_frames(finding, root))
    if not frames:
        return None
    texts = texts or _Texts()
    for entry in candidates(finding):
        found = _tree_fix(entry, frames, root.resolve()) if entry.scope == "tree" else \
            _file_fix(entry, finding, frames, texts)
        if found is not None:
            return found
    return None


def with_applicable_fixes(findings: Iterable[Finding], root: Path) -> tuple[Finding, ...]:
    """``findings`` with ``fix`` set to the fix that applies to each one's code, or "" (module docstring)."""
    texts = _Texts()
    out = []
    for f in findings:
        if dict(f.extra).get("internal_error"):
            out.append(f)
            continue
        found = applicable_fix(f, root, texts)
        extra = tuple((k, v) for k, v in f.extra if k not in (FIX_SITE, FIX_SAFETY, FIX_COMMAND))
        if found is None:
            out.append(dataclasses.replace(f, fix="", extra=extra))
            continue
        extra += ((FIX_SITE, f"{found.path}:{found.line}"), (FIX_SAFETY, "safe" if found.safe else "unsafe"),
                  (FIX_COMMAND, command(found, root)))
        out.append(dataclasses.replace(f, fix=found.fix_id, extra=extra))
    return tuple(out)


def command(found: Applicable, root: Path) -> str:
    """The ``apply-fix`` command that applies ``found`` (paths relative to ``root`` when under it)."""
    def shown(path: Path) -> str:
        try:
            return path.relative_to(root.resolve()).as_posix()
        except ValueError:
            return str(path)
    if catalog_entry(found.fix_id).scope == "tree":
        tree = next((p for p in found.path.parents if _is_target(p)), found.path.parent)
        return f"hlo-doctor apply-fix {found.fix_id} --target {shown(tree)}"
    unsafe = "" if found.safe else " --unsafe"
    return f"hlo-doctor apply-fix {found.fix_id} {shown(found.path)}:{found.line}{unsafe}"


def _is_target(folder: Path) -> bool:
    try:
        detect_target(folder)
    except HloDoctorError:
        return False
    return True


def site_of(finding: Finding) -> tuple[Path, int] | None:
    """Where the finding's fix applies, as the diagnosis recorded it (``extra['fix_site']``)."""
    site = dict(finding.extra).get(FIX_SITE)
    if not isinstance(site, str):
        return None
    path, line = split_source(site)
    return (Path(path), line) if path and line else None

