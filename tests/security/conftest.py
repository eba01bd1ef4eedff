"""Fixtures of the threat-model tests: the report's headless Chromium (shared with ``tests/render``)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

RENDER_TESTS = Path(__file__).resolve().parents[1] / "render"


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """A started headless Chromium (``tests/render/html_browser.Browser``); skipped where none is installed."""
    from hlo_doctor.render.html import available

    if not available():
        pytest.skip("vl-convert-python is not installed: pip install -e '.[test]' (or '.[report]')")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no chromium on PATH: apt-get install chromium")
    sys.path.insert(0, str(RENDER_TESTS))
    from html_browser import Browser

    b = Browser(exe)
    try:
        yield b
    finally:
        b.close()
