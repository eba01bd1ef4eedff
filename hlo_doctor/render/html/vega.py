"""Vega-Lite through vl-convert: the specs compiled to Vega, the Vega runtime inlined in pages, and the
same charts as static SVG/PNG without a browser.

vl-convert-python (the ``report`` extra) carries Vega, Vega-Lite and a JavaScript runtime in one
wheel; nothing is fetched at run time. Charts are compiled to Vega here (the Vega-Lite compiler runs
here, once per chart); the page draws them with vega-embed (about 0.9 MB inlined, once per page).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from hlo_doctor.core.escape.text import visible

__all__ = ["EXTRA", "INSTALL_HINT", "PAGE_CONFIG", "STATIC_CONFIG", "available", "bundle", "to_png", "to_svg",
           "to_vega", "versions"]

EXTRA = "report"
INSTALL_HINT = "pip install 'hlo-doctor[report]'   (vl-convert-python: Vega-Lite charts without a browser)"
"""What to install for charts: the one line commands print when it is missing."""

_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"

# In a page every neutral colour is the page's text colour (``currentColor``), so one drawing reads
# in light and dark schemes and in print: the page's CSS sets ``color`` on each chart.
_NEUTRAL = "currentColor"
PAGE_CONFIG: dict[str, Any] = {
    "background": "transparent",
    "font": _FONT,
    "view": {"stroke": None},
    "title": {"color": _NEUTRAL, "subtitleColor": _NEUTRAL, "anchor": "start", "fontSize": 13},
    "axis": {"labelColor": _NEUTRAL, "titleColor": _NEUTRAL, "domainColor": _NEUTRAL, "tickColor": _NEUTRAL,
             "gridColor": _NEUTRAL, "gridOpacity": 0.15, "labelFontSize": 11, "titleFontSize": 11,
             "labelLimit": 260},
    "legend": {"labelColor": _NEUTRAL, "titleColor": _NEUTRAL, "labelFontSize": 11, "titleFontSize": 11,
               "orient": "bottom", "direction": "horizontal", "labelLimit": 220},
    "text": {"color": _NEUTRAL},
    "rule": {"color": _NEUTRAL},
}
"""Vega-Lite ``config`` of charts drawn in a page (light, dark and print alike)."""

STATIC_CONFIG: dict[str, Any] = {
    **{k: v for k, v in PAGE_CONFIG.items() if k not in ("title", "axis", "legend", "text", "rule")},
    "background": "#ffffff",
    "title": {"color": "#1f2328", "subtitleColor": "#1f2328", "anchor": "start", "fontSize": 13},
    "axis": {**PAGE_CONFIG["axis"], "labelColor": "#1f2328", "titleColor": "#1f2328", "domainColor": "#57606a",
             "tickColor": "#57606a", "gridColor": "#57606a"},
    "legend": {**PAGE_CONFIG["legend"], "labelColor": "#1f2328", "titleColor": "#1f2328"},
    "text": {"color": "#1f2328"},
    "rule": {"color": "#1f2328"},
}
"""Vega-Lite ``config`` of static images: concrete colours on white (an image has no page around it)."""


def address_space_limited() -> bool:
    """Whether this process runs under an address-space limit (``ulimit -v``, ``RLIMIT_AS``).

    vl-convert's engine (V8) reserves tens of GiB of address space when it starts and aborts the whole
    process (SIGTRAP, exit 133) when it cannot: under any such limit it is never started.
    """
    try:
        import resource
    except ImportError:  # not a POSIX system
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return soft != resource.RLIM_INFINITY


LIMIT_HINT = "an address-space limit (ulimit -v) is set, under which the chart engine (V8) would abort"


def unavailable_reason() -> str:
    """Why charts are not drawn (when :func:`available` is False)."""
    return LIMIT_HINT if address_space_limited() else INSTALL_HINT


def available() -> bool:
    """Whether vl-convert can be imported and started (charts can be drawn)."""
    if address_space_limited():
        return False
    try:
        import vl_convert  # noqa: F401
    except ImportError:
        return False
    return True


def _vlc() -> Any:
    import vl_convert

    return vl_convert


def _shown(value: Any) -> Any:
    """``value`` with every string's control, bidi and line-separator characters shown as escapes.

    Labels are names from a capture, and Vega-Lite writes a ``sort`` list into an expression that
    Vega's parser reads as JavaScript, where U+2028 ends a string literal ("Unexpected token").
    """
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def _with_config(spec: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", **_shown(spec), "config": config}


def to_vega(spec: dict[str, Any]) -> dict[str, Any]:
    """A Vega-Lite spec compiled to Vega with the page's config (what the page's runtime draws)."""
    out = _vlc().vegalite_to_vega(_with_config(spec, PAGE_CONFIG))
    return dict(out)


def to_svg(spec: dict[str, Any]) -> str:
    """The chart as a standalone SVG image (white background)."""
    return str(_vlc().vegalite_to_svg(_with_config(spec, STATIC_CONFIG)))


def to_png(spec: dict[str, Any], scale: float = 2.0) -> bytes:
    """The chart as a PNG image (white background), ``scale`` pixels per CSS pixel."""
    return bytes(_vlc().vegalite_to_png(_with_config(spec, STATIC_CONFIG), scale=scale))


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    version = getattr(_vlc(), "__version__", "unknown")
    return Path(root) / "hlo-doctor" / f"vega-embed-vl-convert-{version}.js"


BUNDLE_SHA256 = {
    "1.9.0": "3425bd951a44d478d0505c6b5d1e8d57656b6e9a4da7bfe88a718ce61d76e572",
}
"""The SHA-256 of the script :func:`bundle` makes, per vl-convert release (shipped with the package):
the copy in the cache folder is inlined only when it has this hash."""


def _trusted(cache: Path, text: bytes, version: str) -> bool:
    """Whether the cached script may be inlined: its hash is the one shipped for this release; for a
    release with none shipped, the file and its folder belong to this user and nobody else can write
    them (as ssh checks its keys)."""
    known = BUNDLE_SHA256.get(version)
    if known is not None:
        return hashlib.sha256(text).hexdigest() == known
    try:
        for path in (cache, cache.parent):
            st = os.lstat(path)
            if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or stat.S_ISLNK(st.st_mode):
                return False
    except OSError:
        return False
    return True


@functools.cache
def bundle() -> str:
    """Vega and vega-embed as one script (no imports, no network): it defines ``window.vegaEmbed``.

    Bundling takes vl-convert a second or more, so the script is kept in the user's cache folder,
    one file per vl-convert release, and inlined from there only when it is the script vl-convert
    makes (:func:`_trusted`: a file planted there would run in every page); a cache that cannot be
    read, written or trusted is made again. The new copy is written to a temporary file of an
    unpredictable name, created exclusively, then renamed over it.
    """
    cache = _cache_file()
    version = str(getattr(_vlc(), "__version__", "unknown"))
    try:
        with open(cache, "rb") as f:
            cached = f.read()
        if _trusted(cache, cached, version):
            return cached.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    js = str(_vlc().javascript_bundle())
    # A page must never ask for anything: drop source-map comments a browser's tools would fetch.
    js = "\n".join(line for line in js.splitlines() if not line.lstrip().startswith("//# sourceMappingURL"))
    tmp: str | None = None
    try:
        cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{cache.name}.", suffix=".tmp", dir=cache.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(js.encode("utf-8"))
        os.replace(tmp, cache)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return js


def versions() -> str:
    """``Vega 6.2.0 (vl-convert 1.9.0)``: what drew the charts, for the page's footer."""
    vlc = _vlc()
    return f"Vega {vlc.get_vega_version()}, Vega-Lite {vlc.get_vegalite_versions()[-1]} (vl-convert " \
           f"{getattr(vlc, '__version__', '?')})"
