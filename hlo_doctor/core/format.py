"""Formatters shared by every renderer: times, bytes, percentages, paths, JSON-safe values.

One function per way of writing a value; a renderer picks the one its table or sentence needs.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from hlo_doctor.core.loaded import is_pandas_na

__all__ = ["PathRoots", "fmt_bytes", "fmt_duration", "fmt_ms", "fmt_num", "fmt_parts", "fmt_path", "fmt_pct", "fmt_source",
           "fmt_us", "recoverable_sum", "round_parts",
           "json_float", "json_safe", "path_roots", "short_path", "split_source"]

_SOURCE = re.compile(r"^(.*):(\d+)$")


def fmt_us(us: float | None) -> str:
    """A time per step in a findings table: ``1,562 us`` / ``3.1 ms`` (from 10 ms) / ``-`` when unknown."""
    if us is None:
        return "-"
    if us == 0:
        return "0 us"
    if us >= 10_000:
        return f"{us / 1000:,.1f} ms"
    return f"{us:,.0f} us" if us >= 10 else f"{us:.1f} us"


def round_parts(values: Sequence[float], total: float, digits: int, scale: float = 1.0) -> list[str]:
    """``values / scale`` written with ``digits`` decimals (and thousands commas) so that they add up
    to ``total / scale`` written the same way: each is rounded down, then the largest remainders get
    the steps that are left. A reader who adds the printed parts finds the printed total."""
    unit = 10.0 ** -digits
    target = round(float(f"{total / scale:.{digits}f}") / unit)
    exact = [max(0.0, v) / scale / unit for v in values]
    counts = [math.floor(x + 1e-9) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])[: max(0, target - sum(counts))]:
        counts[i] += 1
    while counts and sum(counts) > target:  # a total printed below its parts' floors
        counts[max(range(len(counts)), key=lambda i: counts[i])] -= 1
    return [f"{c * unit:,.{digits}f}" for c in counts]


def fmt_parts(parts: Sequence[tuple[str, float]], total: float | None) -> str:
    """A recoverable time's parts as a sum that adds up to ``fmt_us(total)`` as printed:
    ``op time 62.0 ms + runtime idle 21.7 ms + host 0.3 ms``; "" without parts or total.

    Every part is written in the total's unit and precision (:func:`fmt_us`: 0.1 ms, 1 us or 0.1 us)
    and rounded by :func:`round_parts`, so the printed parts add up to the printed total in every view.
    """
    from hlo_doctor.core.model import PART_LABELS

    if total is None or not parts:
        return ""
    if total >= 10_000:
        digits, unit, scale = 1, "ms", 1000.0
    elif total >= 10 or total == 0:
        digits, unit, scale = 0, "us", 1.0
    else:
        digits, unit, scale = 1, "us", 1.0
    shown = round_parts([us for _, us in parts], total, digits, scale)
    return " + ".join(f"{PART_LABELS.get(name, name)} {text} {unit}" for (name, _), text in zip(parts, shown, strict=True))


def recoverable_sum(finding: Any) -> str:
    """``84.0 ms = op time 62.0 ms + runtime idle 21.7 ms + host 0.3 ms``: a finding's recoverable time
    and its parts (:attr:`hlo_doctor.core.model.Finding.parts`), as every view prints them."""
    return f"{fmt_us(finding.recoverable_us)} = {fmt_parts(finding.parts, finding.recoverable_us)}"


def fmt_ms(us: float | None) -> str:
    """A measured latency: ``72.53 ms`` (from 1 ms) or ``480 us``; ``-`` for unknown."""
    if us is None:
        return "-"
    return f"{us / 1000:,.2f} ms" if abs(us) >= 1000 else f"{us:,.0f} us"


def fmt_duration(us: float) -> str:
    """A duration in a one-line summary: ``0.8 ms`` from 100 us, ``42 us`` under."""
    return f"{us / 1000:.1f} ms" if abs(us) >= 100 else f"{us:.0f} us"


def fmt_num(x: float | None, digits: int = 1) -> str:
    """A number in a column whose header names the unit: ``1,234.5``; ``-`` for unknown."""
    return "-" if x is None else f"{x:,.{digits}f}"


def fmt_pct(pct: float | None) -> str:
    """A share already in percent: ``5.9%`` (two decimals under 0.1%) / ``-``."""
    if pct is None:
        return "-"
    return f"{pct:.1f}%" if pct >= 0.1 or pct == 0 else f"{pct:.2f}%"


def fmt_bytes(n: Any) -> str:
    """Bytes for people: ``500.0 MiB`` (``12 B`` under a KiB); None counts as 0."""
    value = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover - the loop returns at GiB


def split_source(source: str) -> tuple[str, int | None]:
    """``("sampling.py", 125)`` from ``sampling.py:125``; ``(source, None)`` without a line."""
    m = _SOURCE.match(source or "")
    if m:
        return m.group(1), int(m.group(2))
    return source or "", None


_SITE = re.compile(r"/(?:site|dist)-packages/")
_STDLIB = re.compile(r"/lib/python\d+(?:\.\d+)?t?/")


class PathRoots(NamedTuple):
    """A source path relative to each root it may have ("" where it has none)."""

    installed: str
    """After the last ``site-packages/`` or ``dist-packages/``: ``keras/src/backend/jax/nn.py``."""
    stdlib: str
    """After the standard library's ``lib/pythonX.Y/`` (outside site-packages): ``functools.py``."""
    package: str
    """From the topmost package folder (``__init__.py`` up the tree) of a file on this machine."""
    cwd: str
    """Relative to the working folder."""


def path_roots(path: str) -> PathRoots:
    """``path`` relative to its install folder, the standard library, its package and the working folder."""
    return _path_roots(path, os.getcwd())


@lru_cache(maxsize=4096)
def _path_roots(path: str, cwd: str) -> PathRoots:
    p = path.replace("\\", "/")
    if not p or p.startswith("<"):  # <frozen runpy>, <string>: no file
        return PathRoots("", "", "", "")
    sites = list(_SITE.finditer(p))
    if sites:  # the last one: a venv inside a package's folder still ends at the package
        return PathRoots(p[sites[-1].end():], "", "", "")
    std = _STDLIB.search(p)
    if std is not None:
        return PathRoots("", p[std.end():], "", "")
    base = cwd.replace("\\", "/").rstrip("/") + "/"
    under_cwd = p[len(base):] if cwd and p.startswith(base) else ""
    top = None
    if os.path.isabs(path):
        parent = os.path.dirname(path)
        while parent and os.path.isfile(os.path.join(parent, "__init__.py")):
            top = parent
            up = os.path.dirname(parent)
            if up == parent:
                break
            parent = up
    package = os.path.relpath(path, os.path.dirname(top)).replace("\\", "/") if top else ""
    return PathRoots("", "", package, under_cwd)


def fmt_path(path: str) -> str:
    """A source path as people read it: relative to its package root where it is installed
    (``transformers/models/gpt2/modeling_flax_gpt2.py``), to the standard library, to the working
    folder (a file of one's own), to its topmost package folder, else as given."""
    roots = path_roots(path)
    return roots.installed or roots.stdlib or roots.cwd or roots.package or _checkout_tail(path, os.getcwd())


_MIN_TAIL_PARTS = 2
"""A path from another machine maps onto the working folder by at least this many trailing parts (a
bare ``utils.py`` could be any file)."""


@lru_cache(maxsize=4096)
def _checkout_tail(path: str, cwd: str) -> str:
    """A path from another checkout of the working folder's project (a capture made on another machine
    or folder, ``/srv/app/checkout/pkg/mod.py``) as the longest tail of two parts or more that names a
    file under the working folder; ``path`` itself when none does."""
    if not os.path.isabs(path):
        return path
    parts = PurePosixPath(path.replace("\\", "/")).parts[1:]
    for start in range(len(parts) - _MIN_TAIL_PARTS + 1):
        if os.path.isfile(os.path.join(cwd, *parts[start:])):
            return PurePosixPath(*parts[start:]).as_posix()
    return path


def fmt_source(source: str) -> str:
    """``file:line`` with the file as :func:`fmt_path` writes it; empty stays empty."""
    path, line = split_source(source)
    return f"{fmt_path(path)}:{line}" if line is not None else fmt_path(path)


def short_path(path: str, keep: int = 3) -> str:
    """The last ``keep`` components of a path, for narrow tables."""
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-keep:]) if len(parts) > keep else path


def json_float(x: float) -> float | str | None:
    """A float strict JSON can hold: NaN becomes null, infinities the strings ``inf`` / ``-inf``."""
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def json_safe(value: Any) -> Any:
    """``value`` with only JSON types: NaN, infinities and pandas' ``NA`` become null, numpy scalars
    Python numbers, mappings and sequences are walked, anything else becomes its ``str``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if is_pandas_na(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(x) for k, x in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(x) for x in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    numpy = sys.modules.get("numpy")  # a numpy scalar exists only once numpy is loaded: no import for it
    if numpy is not None and isinstance(value, numpy.generic):  # np.int64(3) -> 3
        return json_safe(value.item())
    return str(value)
