"""The folder a verify run writes its trees, captures and reports to."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hlo_doctor.core import outdir


@contextmanager
def workspace(out_dir: Path | None) -> Iterator[Path]:
    """``out_dir`` (created), or a temporary folder removed at the end."""
    if out_dir is not None:
        # Only a folder verify wrote before (or a new/empty one): the workspace is cleaned inside it.
        yield outdir.claim(Path(out_dir), "verify")
        return
    tmp = Path(tempfile.mkdtemp(prefix="hlo-doctor-verify-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
