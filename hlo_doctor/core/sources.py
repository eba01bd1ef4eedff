"""The source files a capture's ops point at, fingerprinted when the capture is taken, so that a later
diagnosis can say which of them changed since (its line numbers are the capture's, not the file's now).

``profile`` writes ``source_sha256`` (path as the HLO metadata names it -> SHA-256 of the file's bytes)
into the run's ``run.json``; ``diagnose`` compares the files its findings name with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["RECORD_KEY", "changed_since", "file_sha256", "fingerprint", "recorded", "split_source"]

RECORD_KEY = "source_sha256"
"""The key of the fingerprints in ``run.json``."""


def split_source(source: str) -> tuple[str, int] | None:
    """``("path/file.py", 12)`` of a ``path/file.py:12`` source; None for anything else."""
    path, sep, line = source.rpartition(":")
    return (path, int(line)) if sep and path and line.isdigit() else None


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def file_sha256(path: Path) -> str | None:
    """SHA-256 of a file's bytes as :func:`fingerprint` records it; None where it cannot be read."""
    return _sha256(path)


def fingerprint(sources: Iterable[str]) -> dict[str, str]:
    """SHA-256 of each readable file among ``sources`` (``file:line`` strings or paths)."""
    out: dict[str, str] = {}
    for source in sources:
        split = split_source(source)
        name = split[0] if split else source
        if name and name not in out and (digest := _sha256(Path(name))) is not None:
            out[name] = digest
    return dict(sorted(out.items()))


def recorded(run_dir: Path) -> dict[str, str]:
    """The fingerprints a run directory's ``run.json`` holds (empty for captures made before them, or
    without a readable run.json)."""
    try:
        doc = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    value = doc.get(RECORD_KEY) if isinstance(doc, dict) else None
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def changed_since(record: Mapping[str, str], sources: Iterable[str]) -> list[str]:
    """One line per file among ``sources`` whose bytes differ from ``record`` now: ``runner.py changed
    since the capture: line 148 may have moved``. Files the record does not name are not judged."""
    lines: dict[str, set[int]] = {}
    for source in sources:
        split = split_source(source)
        if split is not None and split[0] in record:
            lines.setdefault(split[0], set()).add(split[1])
    out = []
    for name, numbers in sorted(lines.items()):
        if _sha256(Path(name)) == record[name]:
            continue
        shown = ", ".join(str(n) for n in sorted(numbers))
        what = "gone" if not Path(name).exists() else "changed"
        out.append(f"{name} {what} since the capture: line{'s' if len(numbers) > 1 else ''} {shown} "
                   f"may have moved (the findings show the capture's lines)")
    return out
