"""Which capture a path means: the one question every command that reads a capture asks first.

A folder may hold one capture (a run directory, one run folder of host files, an ``opstats.json``
export with its modules) or several: ``doctor --out`` keeps the baseline's profile beside the
treatment's capture, ``verify --out`` keeps both sides', an xprof/TensorBoard log directory keeps a run
per capture session. :func:`locate_capture` says which one is read: a folder hlo-doctor wrote is read
as its baseline (doctor: ``profile/``; verify: ``baseline-run/``); any other folder with more than one
capture inside is refused (:class:`InputError`, exit 2) naming them, since no choice among them would
be the one the user meant. The commands print :meth:`CaptureLocation.line` first, so a reader of the
output always knows which file the figures come from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.core import outdir
from hlo_doctor.core.errors import InputError

XPLANE_SUFFIX = ".xplane.pb"

BASELINE_OF = {"doctor": "profile", "verify": "baseline-run"}
"""The baseline capture inside a folder each command writes (by its ``--out`` marker)."""

_HLO_TEXT_SUFFIXES = (".hlo.txt", "after_optimizations.txt", ".hlo")
_LISTED = 6
"""Captures named in a refusal before ``...``."""

__all__ = ["BASELINE_OF", "CaptureLocation", "display_path", "locate_capture"]


def display_path(path: Path | str) -> str:
    """``path`` relative to the working folder when it is inside it, else as given."""
    p = Path(path)
    try:
        rel = os.path.relpath(p.absolute(), Path.cwd())
    except ValueError:  # another drive (Windows)
        return str(p)
    return str(p) if rel.startswith("..") else rel


@dataclass(frozen=True, slots=True)
class CaptureLocation:
    """The capture a path names: what is read, and why when it is not the path itself."""

    given: Path
    """What was passed."""
    path: Path
    """What the readers are given: the capture's folder (run directory) or file."""
    kind: str
    """``xplane`` (one file), ``run`` (a folder of host files), ``trace-json``, ``export`` (an
    ``opstats.json``/``.parquet``, alone or with ``*.hlo.txt`` modules), ``hlo`` (HLO text: no times)."""
    files: tuple[Path, ...]
    """The files read: each host's ``.xplane.pb``, the export, or the HLO texts."""
    via: str = ""
    """Why ``path`` is not ``given`` (``the baseline profile of the doctor folder runs/doctor``)."""

    def read_files(self) -> tuple[str, ...]:
        """The files read, relative to the working folder (for JSON)."""
        return tuple(display_path(f) for f in self.files)

    def line(self, label: str = "capture") -> str:
        """``capture: runs/x/plugins/profile/<run>/host.xplane.pb`` (and why, and how many hosts)."""
        files = self.read_files()
        if self.kind == "run" and len(files) > 1:
            folder = display_path(self.files[0].parent)
            hosts = ", ".join(Path(f).name[: -len(XPLANE_SUFFIX)] for f in files[:_LISTED])
            what = f"{folder}/ ({len(files)} host files: {hosts}{', ...' if len(files) > _LISTED else ''})"
        elif self.kind == "hlo" and len(files) > 1:
            what = f"{display_path(self.path)}/ ({len(files)} HLO text files; no times)"
        elif self.kind == "export" and len(files) > 1:
            what = f"{files[0]} (with {len(files) - 1} HLO module file{'s' if len(files) > 2 else ''})"
        else:
            what = files[0] if files else display_path(self.path)
        return f"{label}: {what}" + (f" ({self.via})" if self.via else "")


def _xplanes_under(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.rglob(f"*{XPLANE_SUFFIX}") if not p.is_dir())
    except OSError as exc:
        raise InputError(f"{folder}: cannot list it ({exc.strerror or exc})", "check the path and permissions") from None


def _runs(xplanes: list[Path]) -> list[Path]:
    """The folders holding the xplanes: one per capture (a capture's hosts share their folder)."""
    return sorted({p.parent for p in xplanes})


def _refuse(folder: Path, runs: list[Path], why: str) -> InputError:
    names = [display_path(r) for r in runs]
    listed = ", ".join(names[:_LISTED]) + (f", ... ({len(names)} in all)" if len(names) > _LISTED else "")
    return InputError(f"{display_path(folder)} holds {len(runs)} capture{'s' if len(runs) != 1 else ''} ({listed}){why}",
                      "pass the one to read (its run directory, or its folder of .xplane.pb files)")


def locate_capture(path: Path | str) -> CaptureLocation:
    """The capture ``path`` names (see the module's docstring).

    Raises:
        InputError: ``path`` does not exist, holds no capture, or holds several with no baseline
            among them (the message names them).
    """
    given = Path(path)
    if not given.exists():
        raise InputError(f"{given}: no such file or directory",
                         "pass a run directory from 'hlo-doctor profile' or an .xplane.pb file")
    if not given.is_dir():
        return CaptureLocation(given, given, _file_kind(given), (given,))
    return _locate_folder(given, given, "")


def _file_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".pb"):
        return "xplane"
    if name.endswith((".trace.json", ".trace.json.gz")) or name.startswith("perfetto_trace"):
        return "trace-json"
    if name.endswith((".json", ".parquet")):
        return "export"
    return "hlo"


def _locate_folder(given: Path, folder: Path, via: str) -> CaptureLocation:
    wrote = outdir.written_by(folder)
    if wrote in BASELINE_OF and not via:
        inner = folder / BASELINE_OF[wrote]
        if inner.is_dir() and _xplanes_under(inner):
            what = "profile" if wrote == "doctor" else "capture"
            return _locate_folder(given, inner, f"the baseline {what} of the {wrote} folder {display_path(folder)}")
        runs = _runs(_xplanes_under(folder))
        if runs:
            raise _refuse(folder, runs, f", none of them its baseline ({BASELINE_OF[wrote]}/ is missing)")
    direct = sorted(p for p in folder.glob(f"*{XPLANE_SUFFIX}") if not p.is_dir())
    if direct:
        return CaptureLocation(given, folder, "run", tuple(direct), via)
    xplanes = _xplanes_under(folder)
    runs = _runs(xplanes)
    if len(runs) == 1:
        return CaptureLocation(given, folder, "run", tuple(p for p in xplanes if p.parent == runs[0]), via)
    if len(runs) > 1:
        raise _refuse(folder, runs, "")
    export = folder / "opstats.json"
    texts = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(_HLO_TEXT_SUFFIXES))
    if export.is_file():
        return CaptureLocation(given, folder, "export", (export, *texts), via)
    if texts:
        return CaptureLocation(given, folder, "hlo", tuple(texts), via)
    raise InputError(f"{given}: no trace inside (no .xplane.pb, opstats.json or optimized HLO text)",
                     "pass a run directory from 'hlo-doctor profile', an xprof/TensorBoard log directory, "
                     "an .xplane.pb file or an --xla_dump_to folder")
