"""The measurements made on this machine, kept with the capture they price and reused.

A what-if run (and anything else that times a change here) gives a different figure each time on a
shared machine; a diagnosis that re-measured on every run would print another cost, another promise
and perhaps another severity for the same capture. So the first run measures and stores what it
measured (:class:`~.measurement.Measurement`, raw samples included); every later run of the same
capture on the same machine with the same jax and jaxlib reads it back, and the same capture gives
the same JSON byte for byte. ``diagnose --remeasure`` measures again and replaces the records.

Where: in the folder the capture was read from (a run directory; for a bare ``.xplane.pb`` the run
directory holding ``plugins/profile/<run>/``), as :data:`FILE_NAME`, when hlo-doctor wrote that
folder (its ``.hlo-doctor-output`` marker: hlo-doctor never writes into a folder of the user's) and
its mode lets this process write it (mode bits honoured even for root). Otherwise, or when that write
fails, under the user's cache folder: ``$XDG_CACHE_HOME/hlo-doctor/measurements/<capture digest>.json``
(``~/.cache`` without it). Records are read from both places, the run directory's first.

A record is keyed by the capture (a digest of its files' names, sizes and sha256), this machine
(node, CPU model, cores), jax, jaxlib, and what was measured (``kind``, ``key``). Files are written
whole (a temporary file renamed over the old one) and never through a link (``fixes.safe_io``: every
folder below the root opened with ``O_NOFOLLOW``); a file that is malformed, too large, of another
schema or a link is ignored with one warning (:attr:`MeasurementStore.warnings`), never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.outdir import written_by
from hlo_doctor.lint.measurement import Identity, Measurement, from_record, identity_here

SCHEMA = "hlo-doctor.measurements/1"
FILE_NAME = ".hlo-doctor-measurements.json"
"""The store's name in a run directory."""
CACHE_PARTS = ("hlo-doctor", "measurements")
MAX_BYTES = 4 << 20
"""A store file larger than this is not read."""
MAX_RECORDS = 500
"""The most records one file keeps (the newest)."""
_CAPTURE_SUFFIXES = (".xplane.pb", ".trace.json.gz", ".trace.json", "opstats.json", ".hlo.txt",
                     "after_optimizations.txt", ".hlo", ".parquet")

_Key = tuple[str, str, str, str, str, str]


def _key(m: Measurement) -> _Key:
    i = m.identity
    return (i.capture, i.machine, i.jax, i.jaxlib, m.kind, m.key)


class MeasurementStore:
    """The measurements of one capture on this machine: read once, looked up, added to and written.

    ``capture`` is the path the capture was read from; None keeps measurements in this process only
    (a library call that asked for none to be kept). ``remeasure``: stored records are not reused;
    what this process measures replaces them.
    """

    def __init__(self, capture: Path | None = None, *, remeasure: bool = False) -> None:
        self.capture = Path(capture) if capture is not None else None
        self.remeasure = remeasure
        self.warnings: list[str] = []
        """One line per store file ignored or measurement not kept (the CLI prints them)."""
        self.reused: list[Measurement] = []
        self.measured: list[Measurement] = []
        self.path: Path | None = None
        """The file the records were last read from or written to."""
        self._records: dict[_Key, Measurement] | None = None
        self._identity: Identity | None = None

    # -- lookups -------------------------------------------------------------------------------------

    def identity(self) -> Identity:
        """This capture on this machine with this jax (the capture's digest computed once)."""
        if self._identity is None:
            self._identity = identity_here(capture_digest(self.capture) if self.capture is not None else "")
        return self._identity

    def lookup(self, kind: str, key: str) -> Measurement | None:
        """The measurement of ``key`` for this capture here, when one is stored (and may be reused)."""
        i = self.identity()
        found = self._load().get((i.capture, i.machine, i.jax, i.jaxlib, kind, key))
        if found is None:
            return None
        if self.remeasure and found not in self.measured:
            return None
        if found not in self.measured and found not in self.reused:
            self.reused.append(found)
        return found

    def record(self, m: Measurement) -> None:
        """Keep ``m`` (it replaces a record of the same key) and write the store."""
        self._load()[_key(m)] = m
        self.measured.append(m)
        if self.capture is not None:
            self._save()

    def summary(self) -> str:
        """``what-if: 1 measurement reused from PATH (measured 2026-12-01; --remeasure measures again)``, or ""."""
        where = f" {shown_path(self.path)}" if self.path is not None else ""
        parts = []
        if self.reused:
            days = ", ".join(sorted({m.when[:10] for m in self.reused}))
            n = len(self.reused)
            parts.append(f"{n} measurement{'s' if n != 1 else ''} reused from{where} (measured {days}; "
                         "--remeasure measures again)")
        if self.measured and self.capture is not None:
            n = len(self.measured)
            kept = f"kept in{where}" if self.path is not None else "not kept"
            parts.append(f"{n} measured here, {kept}")
        return "what-if: " + "; ".join(parts) if parts else ""

    # -- files ---------------------------------------------------------------------------------------

    def _places(self) -> list[tuple[Path, tuple[str, ...], str]]:
        """(root, folders below it, file name) where this capture's records may be, the run directory first."""
        if self.capture is None:
            return []
        places: list[tuple[Path, tuple[str, ...], str]] = [(run_folder(self.capture), (), FILE_NAME)]
        cache = cache_root()
        if cache is not None:
            places.append((cache, CACHE_PARTS, self.identity().capture.removeprefix("sha256:")[:32] + ".json"))
        return places

    def _load(self) -> dict[_Key, Measurement]:
        if self._records is not None:
            return self._records
        self._records = {}
        if self.capture is None:
            return self._records
        for root, parts, name in reversed(self._places()):  # the run directory's records win
            records = self._read(root, parts, name)
            if records:
                self.path = Path(root, *parts, name)
            self._records.update(records)
        return self._records

    def _read(self, root: Path, parts: tuple[str, ...], name: str) -> dict[_Key, Measurement]:
        """The valid records of one store file; {} (and one warning) when it cannot be used."""
        from hlo_doctor.fixes.safe_io import open_dir

        path = Path(root, *parts, name)
        try:
            with open_dir(root, parts) as d:
                st = d.lstat(name)
                if st is None:
                    return {}
                if not stat.S_ISREG(st.st_mode):
                    raise ValueError("not a regular file (a link or a folder)")
                if st.st_size > MAX_BYTES:
                    raise ValueError(f"{st.st_size:,} bytes, over the {MAX_BYTES:,} a store may hold")
                doc = json.loads(d.read(name).decode("utf-8"))
            return parse_store(doc)
        except FileNotFoundError:
            return {}
        except (OSError, InputError, ValueError, UnicodeDecodeError, RecursionError) as exc:
            why = exc.what if isinstance(exc, InputError) else str(exc) or type(exc).__name__
            self.warnings.append(f"ignoring the stored measurements in {path} ({why}); measuring again")
            return {}

    def _save(self) -> None:
        """Write this capture's records: into the run directory where hlo-doctor may, else the cache."""
        places = self._places()
        if not may_write(places[0][0]):
            places = places[1:]
        errors = []
        for root, parts, name in places:
            try:
                self._write(root, parts, name)
                self.path = Path(root, *parts, name)
                return
            except (OSError, InputError, ValueError) as exc:
                errors.append(f"{Path(root, *parts, name)}: {exc.what if isinstance(exc, InputError) else exc}")
        self.path = None
        self.warnings.append("the what-if's measurement is not kept (" + ("; ".join(errors) or "no cache folder") +
                             "): the next run measures again")

    def _write(self, root: Path, parts: tuple[str, ...], name: str) -> None:
        from hlo_doctor.fixes.safe_io import open_dir

        if parts:
            root.mkdir(parents=True, exist_ok=True)  # the cache root the user's environment names
        with open_dir(root, parts, create=True) as d:
            st = d.lstat(name)
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{name} there is not a regular file")
            kept: dict[_Key, Measurement] = {}
            if st is not None and st.st_size <= MAX_BYTES:
                try:  # other captures' or machines' records in the same file stay
                    kept = parse_store(json.loads(d.read(name).decode("utf-8")))
                except (OSError, InputError, ValueError, UnicodeDecodeError, RecursionError):
                    kept = {}
            mine = self.identity()
            kept = {k: v for k, v in kept.items() if v.identity != mine}
            kept.update({k: v for k, v in self._load().items() if v.identity == mine})
            records = sorted(kept.values(), key=lambda m: (m.when, m.kind, m.key))[-MAX_RECORDS:]
            doc = {"schema": SCHEMA, "records": [m.to_dict() for m in sorted(records, key=_key)]}
            d.write_atomic(name, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8"), 0o644)


def parse_store(doc: object) -> dict[_Key, Measurement]:
    """The records of a store document; ValueError naming what is wrong with it."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"schema {str(doc.get('schema'))[:40]!r}, not {SCHEMA!r}")
    records = doc.get("records")
    if not isinstance(records, list) or len(records) > MAX_RECORDS:
        raise ValueError(f"'records' is not a list of at most {MAX_RECORDS}")
    out: dict[_Key, Measurement] = {}
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise ValueError(f"records[{i}] is not an object")
        try:
            m = from_record(r)
        except ValueError as exc:
            raise ValueError(f"records[{i}]: {exc}") from None
        out[_key(m)] = m
    return out


def run_folder(capture: Path) -> Path:
    """The folder a capture was read from: itself, or the run directory above ``plugins/profile/<run>/``."""
    if capture.is_dir():
        return capture
    folder = capture.parent
    if folder.parent.name == "profile" and folder.parent.parent.name == "plugins":
        return folder.parent.parent.parent
    return folder


def store_capture(path: Path) -> Path:
    """What a store keys the capture a command names by: for a folder holding several captures (a
    ``doctor`` or ``verify`` folder), the run folder of the one it is read as, its baseline profile,
    where ``doctor`` itself keeps its measurements; else ``path``. So a diagnosis of the folder reuses
    what ``doctor`` measured, and keeps what it measures where a diagnosis of the profile finds it."""
    from hlo_doctor.core.errors import HloDoctorError
    from hlo_doctor.trace.locate import locate_capture

    if not path.is_dir():
        return path
    try:
        files = locate_capture(path).files
    except HloDoctorError:
        return path
    if not files:
        return path
    folder = run_folder(Path(files[0]))
    try:
        inside = folder.resolve() != path.resolve() and folder.resolve().is_relative_to(path.resolve())
    except OSError:
        return path
    return folder if inside else path


def run_doc(folder: Path) -> dict[str, Any] | None:
    """The run.json in run folder ``folder`` (:func:`run_folder`) as a dict; None where there is none
    or it cannot be read as one (the capture is read without it)."""
    try:
        doc = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def capture_machine(capture: Path) -> str:
    """The machine run.json says ran the capture (``profile`` records it for a program it ran; an
    attached capture and an export written before record none): "" where it does not say."""
    doc = run_doc(run_folder(capture))
    machine = doc.get("machine") if doc is not None else None
    return machine if isinstance(machine, str) else ""


def may_write(folder: Path) -> bool:
    """Whether the store may be written into ``folder``: a real folder that hlo-doctor wrote (its marker)
    and whose mode lets this process write it (root too honours the mode bits)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or written_by(folder) is None:
        return False
    if os.geteuid() == 0:
        return bool(st.st_mode & 0o222)
    return os.access(folder, os.W_OK | os.X_OK)


def cache_root() -> Path | None:
    """``$XDG_CACHE_HOME`` (when absolute) or ``~/.cache``; None without a home."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg)
    try:
        return Path.home() / ".cache"
    except RuntimeError:
        return None


def capture_digest(capture: Path) -> str:
    """``sha256:...`` over the capture's files (names relative to it, sizes, contents): a copy of a
    capture has the digest of the original, a capture profiled again another."""
    h = hashlib.sha256()
    if capture.is_dir():
        files = sorted(p for p in capture.rglob("*") if p.name.endswith(_CAPTURE_SUFFIXES) and p.is_file()
                       and not p.is_symlink() and not any(s.startswith(".") for s in p.relative_to(capture).parts))
    else:
        files = [capture]
    for f in files:
        name = f.name if f == capture else f.relative_to(capture).as_posix()
        try:
            size = f.stat().st_size
            content = hashlib.sha256()
            with open(f, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    content.update(chunk)
        except OSError:
            continue
        h.update(f"{name}\0{size}\0{content.hexdigest()}\n".encode())
    return "sha256:" + h.hexdigest()


def shown_path(path: Path) -> str:
    """``path`` as a person reads it: relative to the working folder under it, ``~/...`` under the
    home folder, else whole."""
    for base, shown in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            rel = path.resolve().relative_to(base.resolve())
        except (ValueError, OSError, RuntimeError):
            continue
        return f"{shown}{rel}" if shown else str(rel)
    return str(path)
