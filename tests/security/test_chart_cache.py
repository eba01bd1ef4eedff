"""Threat: the chart runtime kept in the user's cache folder is inlined into every page, so a file
planted there runs in the reader's browser; its temporary name was predictable (``.<name>.<pid>.tmp``),
so a link planted at it made ``report`` overwrite the file the link names.

The cached script is inlined only when its SHA-256 is the one shipped for this vl-convert release;
anything else is made again and written through an exclusive temporary file of a random name.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from threats import REPO, cli

RUN = REPO / "sample_traces" / "engine_b64_original_a"
EVIL = "window.vegaEmbed = function () { document.title = 'planted'; return Promise.resolve(); };"


def _cache(tmp_path: Path) -> Path:
    vl_convert = pytest.importorskip("vl_convert")
    from hlo_doctor.render.html.vega import BUNDLE_SHA256

    if vl_convert.__version__ not in BUNDLE_SHA256:
        pytest.skip(f"no hash shipped for vl-convert {vl_convert.__version__}")
    folder = tmp_path / "cache" / "hlo-doctor"
    folder.mkdir(parents=True)
    return folder / f"vega-embed-vl-convert-{vl_convert.__version__}.js"


def test_a_planted_runtime_is_never_inlined(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.write_text(EVIL)
    page = tmp_path / "page.html"
    r = cli("report", str(RUN), "-o", str(page), env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert EVIL not in page.read_text()
    from hlo_doctor.render.html.vega import BUNDLE_SHA256

    # The cache was made again: the script vl-convert makes, by the shipped hash.
    assert hashlib.sha256(cache.read_bytes()).hexdigest() in BUNDLE_SHA256.values()


def test_links_at_the_old_temporary_names_are_never_followed(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    # The child's pid is near this one's: links at every name the old scheme could have used.
    for pid in range(os.getpid(), os.getpid() + 400):
        (cache.parent / f".{cache.name}.{pid}.tmp").symlink_to(victim)
    r = cli("report", str(RUN), "-o", str(tmp_path / "page.html"), env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
            timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert victim.read_text() == "keep"
    # (the measurement store keeps its own folder beside the chart runtime)
    left = [p.name for p in cache.parent.iterdir() if not p.is_symlink() and p != cache and p.name != "measurements"]
    assert left == []  # no temporary file of its own left behind
