"""Small formatters the renderers share."""

from __future__ import annotations

import re

_SOURCE = re.compile(r"^(.*):(\d+)$")


def fmt_us(us: float | None) -> str:
    """``1,562 us`` / ``3.1 ms`` / ``-`` when unknown."""
    if us is None:
        return "-"
    if us == 0:
        return "0 us"
    if us >= 10_000:
        return f"{us / 1000:,.1f} ms"
    return f"{us:,.0f} us" if us >= 10 else f"{us:.1f} us"


def fmt_pct(pct: float | None) -> str:
    """``5.9%`` / ``-``."""
    if pct is None:
        return "-"
    return f"{pct:.1f}%" if pct >= 0.1 or pct == 0 else f"{pct:.2f}%"


def split_source(source: str) -> tuple[str, int | None]:
    """``("sampling.py", 125)`` from ``sampling.py:125``; ``(source, None)`` without a line."""
    m = _SOURCE.match(source or "")
    if m:
        return m.group(1), int(m.group(2))
    return source or "", None


def short_path(path: str, keep: int = 3) -> str:
    """The last ``keep`` components of a path, for narrow tables."""
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-keep:]) if len(parts) > keep else path
