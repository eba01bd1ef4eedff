"""The two sides of ``verify FILE.py:FUNC``: the target as written, and a fixed copy of its file or
another target, each loaded the way ``hlo-doctor profile FILE.py:FUNC`` loads a target.

The fixed copy is made in the run's own work folder (the user's file is only read): the file's bytes
are copied there and the catalog's codemod is applied to the copy through the fixes' transaction. The
copy imports its neighbours from the original file's folder, as the original does.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.verify.program.sites import FixSite

Step = Callable[[], object]
"""A target: takes no argument, runs one step, returns JAX arrays (any pytree of them)."""


@dataclass(frozen=True, slots=True)
class FixedCopy:
    """The treatment made by ``--fix``: the copy's target, the diff, and what the codemod said."""

    spec: str
    """``<work>/treatment/FILE.py:FUNC``."""
    original: Path
    diff: str
    safe: bool
    """Whether every edit is safe (output-identical by construction); unsafe ones are what verify checks."""
    notes: tuple[str, ...]
    sites: tuple[FixSite, ...] = ()
    """Without ``--fix-line``: the lines the baseline's findings named, and which finding named each."""


@dataclass(frozen=True, slots=True)
class Side:
    """One side, loaded: its label, the target as named, the file it came from, the step function."""

    label: str
    spec: str
    source: str
    step: Step


def split_spec(spec: str) -> tuple[str, str]:
    """(``FILE.py`` or ``package.module``, ``FUNC``) of a target."""
    module, _, func = spec.rpartition(":")
    return module, func


def is_file_spec(spec: str) -> bool:
    """Whether a target names a file (``path/to/file.py:func``), not a module."""
    module, _ = split_spec(spec)
    return module.endswith(".py") or "/" in module


def check_fix_target(spec: str, fix_id: str) -> Path:
    """The file ``--fix fix_id`` would copy: :class:`InputError` for an unknown fix, a fix of a whole
    project, a module target, or a file that is not there (before anything is imported)."""
    from hlo_doctor.fixes.catalog import catalog_entry, load_source_fix

    catalog_entry(fix_id)  # an unknown fix names the known ones
    load_source_fix(fix_id)  # a fix of a whole project (bf16-greedy-sampler) is not a file fix
    module, _ = split_spec(spec)
    if not is_file_spec(spec):
        raise InputError(f"--fix {fix_id} needs a file target (FILE.py:FUNC), not the module {module}",
                         "pass the module's file path instead")
    original = Path(module)
    if not original.is_file():
        raise InputError(f"TARGET file {original} does not exist", "check the path before ':'")
    return original


def make_fixed_copy(spec: str, fix_id: str, work: Path, *, line: int | None = None, argument: str = "",
                    sites: Sequence[FixSite] = ()) -> FixedCopy:
    """Copy the target's file into ``work`` and apply ``fix_id`` to the copy (never to the file itself),
    at ``sites`` (the lines the baseline's findings name, each with its finding's hint), else at ``line``
    (with the finding's ``argument``) or, without a line, wherever it applies.

    :class:`InputError` with the codemod's reason when the fix does not apply to the file.
    """
    original = check_fix_target(spec, fix_id)
    # Imported here: the fixes load libcst.
    from hlo_doctor.fixes import FixApplied
    from hlo_doctor.fixes.source.apply import apply_source_fix
    from hlo_doctor.fixes.source.base import Hint

    func = split_spec(spec)[1]
    dest = work / "treatment" / original.name
    if dest.parent.exists():
        shutil.rmtree(dest.parent)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(original.read_bytes())
    # Unsafe edits too: the A/B below is what tells whether they change the outputs.
    where: list[tuple[int | None, Hint]] = [(s.line, s.hint or Hint(argument=s.argument)) for s in sites]
    where = where or [(line, Hint(argument=argument))]
    result = apply_source_fix(fix_id, dest, where, unsafe=True)
    if not isinstance(result, FixApplied):
        reason = getattr(result, "reason", "") or type(result).__name__
        lines = [str(s.line) for s in sites] or ([str(line)] if line is not None else [])
        at = f"{original}:{','.join(lines)}" if lines else str(original)
        raise InputError(f"--fix {fix_id} does not apply to {at}: {reason}",
                         f"hlo-doctor apply-fix {fix_id} {at} --dry-run shows where it looks")
    diff = result.diff.replace(f"a/{dest.name}", f"a/{original.name}").replace(f"b/{dest.name}", f"b/{original.name}")
    safe = all(not e.detail.startswith("unsafe") for e in result.elements)
    return FixedCopy(f"{dest}:{func}", original, diff, safe, tuple(result.notes), tuple(sites))


@contextmanager
def _neighbours(folder: Path | None) -> Iterator[None]:
    """``folder`` on ``sys.path`` for the block: the copy imports the original's neighbours."""
    if folder is None:
        yield
        return
    entry = str(folder.resolve())
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        try:
            sys.path.remove(entry)
        except ValueError:
            pass


def load_side(label: str, spec: str, *, shown: str = "", neighbours: Path | None = None) -> Side:
    """Import ``spec``'s module as ``profile`` does and return its step function.

    ``shown``: how the side is named in messages and the report (the original file for a fixed copy).
    An import that fails is an :class:`InputError` (exit 2) naming the side.
    """
    from hlo_doctor.capture import resolve_target
    from hlo_doctor.core.errors import HloDoctorError

    name = shown or spec
    try:
        with _neighbours(neighbours):
            step = resolve_target(spec)
    except HloDoctorError as exc:
        raise InputError(f"{label} {name}: {exc.what}", exc.hint) from exc
    return Side(label, name, split_spec(spec)[0], step)
