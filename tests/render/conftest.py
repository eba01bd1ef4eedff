"""Fixtures of the HTML report's tests: one headless Chromium for the session (Debian's ``chromium``,
which ``make test`` installs where apt-get can), skipped with the reason where there is none."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from hlo_doctor.render.html import available


def chromium_path() -> str | None:
    """The Chromium to drive: ``$HLO_DOCTOR_CHROMIUM``, else ``chromium`` on PATH."""
    return os.environ.get("HLO_DOCTOR_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """A started headless Chromium (``html_browser.Browser``)."""
    if not available():
        pytest.skip("vl-convert-python is not installed: pip install -e '.[test]' (or '.[report]')")
    exe = chromium_path()
    if exe is None:
        pytest.skip("no chromium on PATH: 'make test' installs Debian's chromium with apt-get where it runs as "
                    "root; elsewhere: apt-get install chromium (or set HLO_DOCTOR_CHROMIUM)")
    from html_browser import Browser

    b = Browser(exe)
    try:
        yield b
    finally:
        b.close()
